from collections.abc import Generator

from pydantic import BaseModel


class Count(BaseModel):
    upto: int


class Model:
    def predict(self, count: Count) -> Generator[str, None, None]:
        for i in range(count.upto):
            yield f"{i},"
