from layout_pkg import VALUE


class MyModel:
    def __init__(self, data_dir, **kwargs):
        self._data_dir = data_dir

    def predict(self, inputs):
        return {
            "package": VALUE,
            "data": (self._data_dir / "asset.txt").read_text().strip(),
            "data_dir_name": self._data_dir.name,
        }
