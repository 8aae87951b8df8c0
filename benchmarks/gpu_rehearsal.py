"""The GPU machine rehearsed here: a Python 3.12 environment that holds only what the device will have, the
image's serve-path distributions at the image's versions (a virtual environment, cached between runs) and
a device kit's wheels unpacked from its parts as the device unpacks them (gpu_unpack.py), nothing from the
project's .venv. tests/test_gpu_kit.py serves and dry-runs the check in it.

    .venv/bin/python -m benchmarks.gpu_rehearsal --kit build/device-kit --root /tmp/rehearsal
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .gpu_image import IMAGE_PYTHON, image_pins

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path.home() / ".cache" / "attnserve"


class RehearsalError(RuntimeError):
    pass


def python312() -> str:
    """The image's Python (3.12) on this machine: on PATH, else pyenv's."""
    found = shutil.which(f"python{IMAGE_PYTHON}")
    if found and subprocess.run([found, "--version"], capture_output=True).returncode == 0:
        return found
    pyenv = sorted(glob.glob(str(Path.home() / ".pyenv" / "versions" / f"{IMAGE_PYTHON}.*" / "bin" / "python3")))
    if pyenv:
        return pyenv[-1]
    raise RehearsalError(
        f"the device rehearsal needs Python {IMAGE_PYTHON}, the GPU image's: none on PATH or under ~/.pyenv "
        f"(install it: pyenv install {IMAGE_PYTHON})"
    )


def image_environment(cache: Path = CACHE) -> Path:
    """A virtual environment of the image's serve-path distributions (--no-deps: nothing else comes in),
    made once per list of pins and kept in the cache. -> its python."""
    pins = image_pins()
    venv = cache / f"rehearsal-{hashlib.sha256(' '.join(pins).encode()).hexdigest()[:12]}"
    python = venv / "bin" / "python"
    if not (venv / ".complete").is_file():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([python312(), "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--no-deps", "--only-binary=:all:", *pins], check=True
        )
        (venv / ".complete").touch()
    return python


def unpack_kit(kit_dir: Path, python: Path, root: Path) -> tuple[Path, Path]:
    """Every group of the kit, from its parts, into root/kit (the models, references) and root/site (the
    wheels), by gpu_unpack.py with the environment's python, as on the device. -> (kit, site)."""
    shutil.rmtree(root, ignore_errors=True)
    parts, kit, site = root / "parts", root / "kit", root / "site"
    linked_copy(kit_dir / "parts", parts)
    for group in ("a", "b"):
        command = [
            str(python),
            "-m",
            "benchmarks.gpu_unpack",
            "--group",
            group,
            "--manifest",
            str(kit_dir / "kit.json"),
            "--parts",
            str(parts),
            "--kit",
            str(kit),
            "--site",
            str(site),
        ]
        subprocess.run(command, check=True, cwd=ROOT, env=clean_env())
    return kit, site


def linked_copy(source: Path, target: Path) -> Path:
    """A copy of a folder whose files are only read, as hard links where the file system allows: the
    rehearsal's copies of a kit of hundreds of MiB cost no disk."""

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    return Path(shutil.copytree(source, target, copy_function=link))


def clean_env(site: Path | None = None) -> dict:
    """This process's environment without anything that points into the project's .venv; with site, the
    kit's wheels first on the path, then the working tree (PYTHONPATH=/tmp/site:$PWD on the device)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    if site is not None:
        env["PYTHONPATH"] = f"{site}{os.pathsep}{ROOT}"
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kit", type=Path, default=Path("build/device-kit"))
    parser.add_argument("--root", type=Path, default=Path("build/rehearsal"))
    args = parser.parse_args()
    python = image_environment()
    kit, site = unpack_kit(args.kit, python, args.root)
    print(f"rehearsal: {python}, kit unpacked into {kit}, wheels into {site}; run as the device does:")
    print(f"  PYTHONPATH={site}:{ROOT} {python} -m benchmarks.gpu_check --kit {kit} --device cpu --out OUT")


if __name__ == "__main__":
    sys.exit(main())
