"""On the GPU machine (standard library only, with the image's python3): join one group of the device kit's
parts, carried call by call into /tmp/kit/parts, check every part and the whole against kit.json, unpack
it into /tmp/kit and install its wheels into /tmp/site (first on PYTHONPATH, it shadows the image's CPU
build of onnxruntime). A line per step; exit 1 with the reason on any mismatch.

    python3 -m benchmarks.gpu_unpack --group a --manifest build/device-kit/kit.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

KIT = Path("/tmp/kit")
SITE = Path("/tmp/site")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def say(started: float, message: str) -> None:
    print(f"[unpack {time.perf_counter() - started:6.1f} s] {message}", flush=True)


def unpack(group: dict, parts: Path, kit: Path, site: Path) -> None:
    started = time.perf_counter()
    missing = [p["name"] for p in group["parts"] if not (parts / p["name"]).is_file()]
    if missing:
        sys.exit(f"gpu_unpack: parts missing from {parts}: {', '.join(missing)} (make their calls first)")
    for part in group["parts"]:
        if sha256(parts / part["name"]) != part["sha256"]:
            sys.exit(f"gpu_unpack: {part['name']} is corrupt (sha256 differs from kit.json): carry it again")
    say(started, f"{len(group['parts'])} parts checked")
    kit.mkdir(parents=True, exist_ok=True)
    joined = kit / f"{group['name']}.tar"
    with open(joined, "wb") as out:
        for part in group["parts"]:
            with open(parts / part["name"], "rb") as f:
                shutil.copyfileobj(f, out, 1 << 22)
    if sha256(joined) != group["sha256"]:
        sys.exit(f"gpu_unpack: the joined {joined.name} differs from kit.json")
    with tarfile.open(joined) as tar:
        tar.extractall(kit, filter="data")
    joined.unlink()
    say(started, f"group {group['name']} unpacked into {kit}: {', '.join(group['contents'])}")
    wheels = sorted((kit / "wheels").glob("*.whl")) if group.get("wheels") else []
    if wheels:
        command = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--no-cache-dir",
            "--upgrade",
            "--target",
            str(site),
            *map(str, wheels),
        ]
        subprocess.run(command, check=True)
        say(started, f"{len(wheels)} wheels installed into {site}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group", required=True)
    parser.add_argument("--manifest", type=Path, required=True, help="the kit's kit.json")
    parser.add_argument("--parts", type=Path, default=KIT / "parts")
    parser.add_argument("--kit", type=Path, default=KIT)
    parser.add_argument("--site", type=Path, default=SITE)
    args = parser.parse_args()
    manifest = json.loads(args.manifest.read_text())
    groups = {g["name"]: g for g in manifest["groups"]}
    if args.group not in groups:
        sys.exit(f"gpu_unpack: no group {args.group!r} in {args.manifest} ({', '.join(groups)})")
    unpack(groups[args.group], args.parts, args.kit, args.site)


if __name__ == "__main__":
    main()
