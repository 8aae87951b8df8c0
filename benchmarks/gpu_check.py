"""The product on a GPU, phase by phase, from an unpacked device kit (benchmarks/gpu_kit.py): the preflight,
then `attnserve serve --device cuda` on the kit's float16 graphs (the device-resident cache, CPU fallback
refused) checked for parity against the float32 CPU outputs computed when the kit was built, measured
against PyTorch on the same GPU, and the moonshot figures recorded.

    # on the GPU machine, as the kit's printed calls say:
    PYTHONPATH=/tmp/site:$PWD python3 -u -m benchmarks.gpu_check --kit /tmp/kit --phases preflight,parity --out $OUT/gpu
    # here, the dry run on the CPU (tests/test_gpu_kit.py runs it from a small kit):
    .venv/bin/python -m benchmarks.gpu_check --kit DIR --device cpu --out /tmp/gpu-check

Each phase prints a timestamped line when it starts and ends, and results.json (with results.md) is
written after every phase; a phase that fails is recorded with its error and the server's last 200 log
lines, and the next one runs. Results accumulate across calls in --state, so that a rerun with --phases
repeats only what failed or did not run, and every call brings all of them back. The server's log is kept
in --out (cut at 8 MiB). Phases: benchmarks/gpu_plan.py PHASES, in order of value.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import traceback
from pathlib import Path

from testing.server_process import ServerProcess

from . import gpu_api_processes_phase, gpu_phases, gpu_preflight, gpu_speech_phase, gpu_t5_phase
from .gpu_plan import PHASES
from .gpu_sizes import Sizes

STATE = Path("/tmp/attnserve-gpu-results.json")


class Check:
    """The check's context: the kit, the device, the results so far, and the server once a phase needs it."""

    def __init__(self, kit: Path, device: str, out: Path, state: Path):
        self.kit, self.device, self.out, self.state = kit, device, out, state
        self.started = time.perf_counter()
        self.references = json.loads((kit / "references.json").read_text())
        self.results = json.loads(state.read_text()) if state.is_file() else {"phases": {}}
        self.results["sizes"] = json.loads((kit / "sizes.json").read_text())
        self.results.setdefault("machine", []).append(machine(device))
        self._server: ServerProcess | None = None
        out.mkdir(parents=True, exist_ok=True)

    @property
    def sizes(self) -> Sizes:
        return Sizes(**self.results["sizes"])

    def say(self, message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')} +{time.perf_counter() - self.started:6.1f} s] {message}", flush=True)

    @property
    def server(self) -> ServerProcess:
        """One server with every model the kit holds so far, started when a phase first needs it."""
        if self._server is None:
            models = [p for p in sorted((self.kit / "models").iterdir()) if (p / "manifest.json").is_file()]
            self._server = self.start_server(models, self.out / "server.log")
        return self._server

    def start_server(self, models: list[Path], log_file: Path, *extra: str) -> ServerProcess:
        """A server of these models with the check's settings (and `extra` arguments)."""
        streams = str(self.sizes.moonshot_streams)
        self.say(f"starting a server: {', '.join(m.name for m in models)} on {self.device} {' '.join(extra)}")
        server = ServerProcess(
            "--device",
            self.device,
            "--precision",
            "fp16",
            "--max-new-tokens",
            str(max(self.sizes.new_tokens, 32)),
            "--max-batch-size",
            "64",
            "--kv-cache-bytes",
            "0",
            "--max-running-sequences",
            streams,
            "--max-client-batch-size",
            "64",
            # One process for the doors, as the first lease measured: the api-processes phase starts servers of
            # its own with more (a later --api-processes wins).
            "--api-processes",
            "1",
            *extra,
            models=[str(m) for m in models],
            log_file=log_file,
        )
        self.say(f"server up on port {server.port}")
        return server

    def run(self, name: str, phase) -> None:
        self.say(f"{name}: start")
        started = time.perf_counter()
        try:
            record = {"ok": True, **phase()}
        except BaseException as error:  # recorded, and the next phase runs
            record = {"ok": False, "error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
            if self._server is not None:
                record["server_log"] = self._server.output()
            if isinstance(error, KeyboardInterrupt):
                raise
        record["seconds"] = round(time.perf_counter() - started, 2)
        if not record["ok"]:
            record.setdefault("error", "failed checks: " + ", ".join(failed_checks(record)))
        self.results["phases"][name] = record
        self.say(f"{name}: {'ok' if record['ok'] else 'FAILED: ' + record['error'][:300]} ({record['seconds']} s)")
        self.save()

    def save(self) -> None:
        text = json.dumps(self.results, indent=2, default=str) + "\n"
        for path in (self.out / "results.json", self.state):
            path.write_text(text)
        (self.out / "results.md").write_text(markdown(self.results))

    def close(self) -> None:
        if self._server is not None:
            self._server.stop()


def failed_checks(record: dict) -> list[str]:
    return [f"{c['check']} ({c.get('error', '')[:200]})" for c in record.get("checks", []) if not c["ok"]]


def preflight(kit: Path, device: str, say) -> dict:
    checks = gpu_preflight.run(kit, device, say)
    return {"ok": all(c["ok"] for c in checks), "checks": checks}


def machine(device: str) -> dict:
    import onnxruntime as ort

    info = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "device": device,
        "python": platform.python_version(),
        "onnxruntime": ort.__version__,
        "cpu": platform.processor() or platform.machine(),
    }
    if device == "cuda":
        info["gpu"] = gpu_phases.nvidia_smi("name,memory.total,driver_version")
    return info


# A record's entries that results.md leaves to results.json: its state, and what is too long for a table's cell.
NOT_FIGURES = ("ok", "seconds", "error", "traceback", "server_log", "tokens")


def markdown(results: dict) -> str:
    """One row per phase: its state, time and key figures."""
    lines = [
        f"# GPU check ({results['machine'][-1]['device']}, {results['machine'][-1]['date']})",
        "",
        "| phase | state | seconds | figures |",
        "| --- | --- | --- | --- |",
    ]
    for name, record in results["phases"].items():
        figures = {k: v for k, v in record.items() if k not in NOT_FIGURES}
        shown = record["error"] if not record["ok"] else json.dumps(figures, default=str)
        lines.append(f"| {name} | {'ok' if record['ok'] else 'failed'} | {record['seconds']} | {shown[:1500]} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kit", type=Path, required=True, help="the unpacked device kit (/tmp/kit there)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated, of {', '.join(PHASES)}")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--state", type=Path, default=STATE, help="results of earlier calls, kept between them")
    args = parser.parse_args()
    wanted = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = [p for p in wanted if p not in PHASES]
    if unknown:
        parser.error(f"--phases: {', '.join(unknown)} not among {', '.join(PHASES)}")
    check = Check(args.kit, args.device, args.out, args.state)
    try:
        for name in (p for p in PHASES if p in wanted):  # in the order of value, whatever the order asked
            if name == "preflight":
                check.run(name, lambda: preflight(args.kit, args.device, check.say))
            else:
                own_files = {
                    "speech": gpu_speech_phase.speech,
                    "t5": gpu_t5_phase.t5,
                    "api-processes": gpu_api_processes_phase.api_processes,
                }
                phase = own_files.get(name) or gpu_phases.PHASES[name]
                check.run(name, lambda phase=phase: phase(check))
    finally:
        check.close()
        check.save()
    failed = [name for name, record in check.results["phases"].items() if not record["ok"]]
    check.say(
        f"done: {len(check.results['phases']) - len(failed)} phases ok" + (f", failed: {failed}" if failed else "")
    )


if __name__ == "__main__":
    main()
