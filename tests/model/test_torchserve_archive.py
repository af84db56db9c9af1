"""TorchServe archives: reading .mar/.tar.gz safely, and `podium archive` writing them."""

from __future__ import annotations

import io
import json
import os
import tarfile
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from ts_kit import TS_MODELS, archive, extract

from podium.cli import main
from podium.errors import DefinitionError
from podium.model import torchserve
from podium.model.discovery import discover
from podium.model.torchserve._archive import MANIFEST

MANIFEST_JSON = json.dumps({"runtime": "python", "model": {"modelName": "x", "handler": "h.py"}})


def test_archive_command_builds_a_mar_that_discovery_reads(tmp_path: Path) -> None:
    src = TS_MODELS / "class-style"
    result = CliRunner().invoke(
        main,
        [
            "archive",
            "--model-name", "greeter",
            "--handler", str(src / "handler.py"),
            "--config-file", str(src / "model-config.yaml"),
            "--extra-files", str(TS_MODELS / "README.md"),
            "--version", "1.5",
            "--export-path", str(tmp_path),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    mar = tmp_path / "greeter.mar"
    assert f"wrote {mar}" in result.output
    with zipfile.ZipFile(mar) as zf:
        assert sorted(zf.namelist()) == sorted(
            ["handler.py", "model-config.yaml", "README.md", MANIFEST]
        )
        manifest = json.loads(zf.read(MANIFEST))
    assert manifest["runtime"] == "python"
    assert manifest["model"] == {
        "modelName": "greeter",
        "handler": "handler.py",
        "modelVersion": "1.5",
        "configFile": "model-config.yaml",
    }
    (source,) = discover(mar)
    assert source.contract == "torchserve"
    assert (source.config.name, source.config.version) == ("greeter", "1.5")
    assert source.file == mar.resolve()
    assert (source.model_dir / "README.md").is_file()
    # an existing archive is kept unless --force
    again = CliRunner().invoke(
        main, ["archive", "--model-name", "greeter", "--handler", str(src / "handler.py"),
               "--export-path", str(tmp_path)]
    )  # fmt: skip
    assert again.exit_code != 0 and "--force" in again.output


@pytest.mark.parametrize("fmt", ["default", "tgz", "no-archive"])
def test_every_archive_format_is_a_source(tmp_path: Path, fmt: str) -> None:
    path = archive("module-style", tmp_path, fmt)
    assert torchserve.is_source(path)
    (source,) = discover(path)
    assert source.config.name == "module-style"
    assert (source.model_dir / "handler.py").is_file()


def test_an_archive_is_extracted_once_per_content(tmp_path: Path) -> None:
    path = archive("module-style", tmp_path, "default")
    first = extract(path)
    copy = tmp_path / "copy.mar"
    copy.write_bytes(path.read_bytes())
    assert extract(copy) == first
    assert oct(first.parent.stat().st_mode & 0o777) == "0o700"  # private to the process


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


@pytest.mark.parametrize("evil", ["../escape.py", "/abs/escape.py", "a/../../escape.py"])
def test_zip_members_cannot_escape(tmp_path: Path, evil: str) -> None:
    mar = _zip(
        tmp_path / f"evil{abs(hash(evil))}.mar", {MANIFEST: MANIFEST_JSON.encode(), evil: b"x"}
    )
    with pytest.raises(DefinitionError, match="outside the model directory; refused"):
        extract(mar)
    assert not (tmp_path / "escape.py").exists()
    assert not Path("/abs/escape.py").exists()


def test_zip_symlinks_are_refused(tmp_path: Path) -> None:
    mar = tmp_path / "link.mar"
    with zipfile.ZipFile(mar, "w") as zf:
        zf.writestr(MANIFEST, MANIFEST_JSON)
        info = zipfile.ZipInfo("h.py")
        info.external_attr = 0o120777 << 16
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(DefinitionError, match="symbolic link; refused"):
        extract(mar)


def test_tar_members_cannot_escape_or_link(tmp_path: Path) -> None:
    def tar(name: str, member: tarfile.TarInfo, data: bytes = b"") -> Path:
        path = tmp_path / name
        with tarfile.open(path, "w:gz") as tf:
            head = tarfile.TarInfo(MANIFEST)
            head.size = len(MANIFEST_JSON)
            tf.addfile(head, io.BytesIO(MANIFEST_JSON.encode()))
            member.size = len(data)
            tf.addfile(member, io.BytesIO(data))
        return path

    with pytest.raises(DefinitionError, match="outside the model directory"):
        extract(tar("a.tar.gz", tarfile.TarInfo("../../escape.py"), b"x"))
    link = tarfile.TarInfo("h.py")
    link.type = tarfile.SYMTYPE
    link.linkname = "/etc/passwd"
    with pytest.raises(DefinitionError, match="link or a special file; refused"):
        extract(tar("b.tar.gz", link))
    assert not (tmp_path.parent / "escape.py").exists()


def test_archive_without_manifest_or_broken(tmp_path: Path) -> None:
    with pytest.raises(DefinitionError, match="holds no MAR-INF/MANIFEST.json"):
        extract(_zip(tmp_path / "empty.mar", {"h.py": b""}))
    bad = tmp_path / "bad.mar"
    bad.write_bytes(b"not a zip")
    with pytest.raises(DefinitionError, match="not a readable archive"):
        extract(bad)


def test_manifest_config_file_must_exist(tmp_path: Path) -> None:
    model = archive("module-style", tmp_path)
    manifest = model / MANIFEST
    data = json.loads(manifest.read_text())
    data["model"]["configFile"] = "missing.yaml"
    manifest.write_text(json.dumps(data))
    with pytest.raises(DefinitionError, match="configFile 'missing.yaml' is missing"):
        discover(model)


def test_check_command_reports_a_bad_model_config(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "handler.py").write_text("def handle(data, context):\n    return data\n")
    (src / "model-config.yaml").write_text("useJobTicket: true\n")
    result = CliRunner().invoke(
        main,
        ["archive", "--model-name", "seq", "--handler", str(src / "handler.py"),
         "--config-file", str(src / "model-config.yaml"), "--export-path", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 0
    checked = CliRunner().invoke(main, ["check", str(tmp_path / "seq.mar")])
    assert checked.exit_code == 1
    assert "'useJobTicket' is not supported yet" in checked.output
    assert os.path.exists(tmp_path / "seq.mar")


def _room(monkeypatch: pytest.MonkeyPatch, free: int) -> None:
    """Pretend the extraction's filesystem has ``free`` bytes free beyond what is kept free."""
    from podium.model.torchserve import _archive

    real = _archive.shutil.disk_usage
    monkeypatch.setattr(
        _archive.shutil,
        "disk_usage",
        lambda path: real(path)._replace(free=_archive.KEEP_FREE + free),
    )


def test_a_zip_bigger_than_the_disk_is_refused_before_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 4 MiB of zeros deflate to a few KiB: what a zip bomb is made of, in small.
    mar = tmp_path / "bomb.mar"
    with zipfile.ZipFile(mar, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(MANIFEST, MANIFEST_JSON)
        zf.writestr("weights.bin", bytes(4 << 20))
    assert mar.stat().st_size < 64 << 10
    _room(monkeypatch, 1 << 20)
    with pytest.raises(DefinitionError, match=r"need 4\.0 MiB .*'weights.bin'.*refused"):
        extract(mar)
    from podium.model.torchserve import _archive

    assert not list(_archive._private_root().rglob("weights.bin"))  # nothing was written


def test_a_tar_stream_bigger_than_the_disk_stops_at_that_member(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "bomb.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for name, data in ((MANIFEST, MANIFEST_JSON.encode()), ("w.bin", bytes(4 << 20))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    _room(monkeypatch, 1 << 20)
    with pytest.raises(DefinitionError, match="at member 'w.bin'.*refused"):
        extract(path)


def test_an_archive_of_too_many_members_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from podium.model.torchserve import _archive

    monkeypatch.setattr(_archive, "MAX_MEMBERS", 3)
    mar = _zip(
        tmp_path / "many.mar", {MANIFEST: MANIFEST_JSON.encode(), **{f"{i}": b"" for i in range(3)}}
    )
    with pytest.raises(DefinitionError, match="more than 3 members; refused"):
        extract(mar)


def test_an_archive_that_fits_is_extracted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mar = _zip(tmp_path / "fits.mar", {MANIFEST: MANIFEST_JSON.encode(), "w.bin": bytes(1000)})
    _room(monkeypatch, 1 << 20)
    assert (extract(mar) / "w.bin").stat().st_size == 1000
