"""What Podium extracted for a model version goes with it: when the version is removed from
the registry (after its workers stopped), or at once when building it failed; and only once no
other version still uses it."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import TEST_MODELS

from podium.errors import DefinitionError
from podium.model.torchserve._archive import archive_model
from podium.runtime.loading import build_path
from podium.runtime.registry import Registry

HANDLER = TEST_MODELS / "torchserve" / "module-style" / "handler.py"


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(4)
    yield pool
    pool.shutdown(wait=True)


def _mar(directory: Path, name: str, handler: Path = HANDLER) -> Path:
    return archive_model(model_name=name, handler=handler, export_path=directory)


def _extractions() -> set[Path]:
    from podium.model.torchserve import _archive as _ts_archive

    return set(_ts_archive._private_root().iterdir())


def test_a_failed_build_leaves_no_extraction(tmp_path: Path, executor: ThreadPoolExecutor) -> None:
    handler = tmp_path / "handler.py"
    handler.write_text("raise RuntimeError('cannot even be imported')\n")
    mar = _mar(tmp_path, "broken-import", handler)
    before = _extractions()
    with pytest.raises(DefinitionError, match="cannot even be imported"):
        build_path(mar, {}, secrets={}, executor=executor)
    assert _extractions() == before


@pytest.mark.anyio
async def test_removing_a_version_removes_its_extraction_once_unused(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    mar = _mar(tmp_path, "held-twice")
    registry = Registry()
    before = _extractions()
    (first,) = build_path(mar, {}, secrets={}, executor=executor)
    (second,) = build_path(mar, {"name": "held-twice-copy"}, secrets={}, executor=executor)
    (hold,) = first.owned
    (model_dir,) = _extractions() - before
    for mv in (first, second):
        registry.add(mv)
        await mv.load()
    assert (model_dir / "handler.py").is_file()
    await registry.remove("held-twice")
    assert first.owned == []
    assert (model_dir / "handler.py").is_file()  # the copy still uses it
    await registry.remove("held-twice-copy")
    assert not model_dir.exists() and _extractions() == before
    await first.release()  # released already: nothing more happens
    hold.release()
