"""The device calls that carry a device kit and run the GPU check, in order, each ready to paste (its command,
the paths it carries, its timeout), and the timeline they add up to.

A machine goes back about 30 s after a call, and a fresh one starts bare: the calls are made back to back.
The parts wait in /tmp/kit/parts between calls; the last part of a group carries kit.json and unpacks it.
"""

from __future__ import annotations

from pathlib import Path

# Measured on the first lease (2026-12-04, docs/benchmarks.md "GPU: the first run"): a machine started
# in 30 s, a call carrying a part took 3-6 s between replies, unpacking group a 7 s (its wheels installed)
# and b 1.4 s; the phases' times are that run's, rounded up, less what the counts cut since then take
# (gpu_sizes.py FULL: half the numbers and the sentences, 64 Marian prompts of the 100 at 1 stream's 274
# tokens/s; speech's calls within a budget of 60 s, its long file half as long; generate_loads' one caller
# 16 sentences of 32; the cuda-graphs phase takes its eager tokens from parity-marian's).
COLD_START_S = 30
CALL_S = 3
TRANSFER_BYTES_PER_S = 50e6
UNPACK_S = {"a": 8, "b": 2}
PHASES = {  # phase -> seconds it is estimated to take on the device, in order of value
    "preflight": 25,  # the first lease's 15, and the sampling graph's check (gpu_sampling_check.py)
    "parity": 50,  # 65 with 2,000 numbers each way
    "parity-marian": 32,  # 40 with 100 prompts
    "embeddings": 55,  # 70 with 8,192 sentences
    "generation": 66,  # 75 with 32 sentences at one caller (ours 7.5 s, transformers' 10)
    "memory": 1,
    "t5": 70,  # not yet run on a device: generation's, and its 64 + 64 prompts each alone
    "moonshot": 25,  # 35 with 32,768 sentences
    "api-processes": 30,  # not yet run on a device: 4,096 calls to the check's server, then a split server's
    # start, its 4,096 calls and a moonshot's streams (the check's server's streams are the moonshot's)
    "cuda-graphs": 50,  # 80 with 100 prompts served eagerly again and 32 sentences at one caller
    "speech": 94,  # one file, the long file (4 recordings, about 200 s; 33 s for 392 on the first lease) cut
    # at its silences, the calls within their 60 s budget
}
# The phases each call runs: the last call of group a (the first results), of group b, then one of its own.
CALL_PHASES = (
    ("a", ("preflight", "parity")),
    ("b", ("parity-marian", "embeddings", "generation", "memory", "t5")),
    (None, ("moonshot", "api-processes", "cuda-graphs", "speech")),
)
RESULTS = "$OUT/gpu"
# The lease's goals (issue 42): the first results back by minute 6, every phase done by minute 11, and room
# left in the 15 to run the longest phase again.
LEASE_S, FIRST_RESULTS_BY_S, DONE_BY_S = 15 * 60, 6 * 60, 11 * 60


def phases_of(group: str | None) -> list[str]:
    return next(list(phases) for g, phases in CALL_PHASES if g == group)


def check_command(phases: list[str]) -> str:
    return (
        f"PYTHONPATH=/tmp/site:$PWD python3 -u -m benchmarks.gpu_check --kit /tmp/kit --phases {','.join(phases)}"
        f" --out {RESULTS}"
    )


def calls(kit: dict, kit_dir: Path) -> list[dict]:
    """The device calls: one per part, a group's last also unpacking it and running the phases it enables;
    then the calls of phases that need no part."""
    out = []
    for group in kit["groups"]:
        for i, part in enumerate(group["parts"]):
            path = f"{kit_dir}/parts/{part['name']}"
            command = f"mkdir -p /tmp/kit/parts && cp {path} /tmp/kit/parts/"
            carry = [path]
            seconds = CALL_S + (part["bytes"] + kit["tree_bytes"]) / TRANSFER_BYTES_PER_S
            if i == len(group["parts"]) - 1:
                phases = phases_of(group["name"])
                carry.append(f"{kit_dir}/kit.json")
                command += (
                    f" && python3 -m benchmarks.gpu_unpack --group {group['name']} --manifest {kit_dir}/kit.json"
                    f" && {check_command(phases)}"
                )
                seconds += UNPACK_S[group["name"]] + sum(PHASES[p] for p in phases)
            else:
                command += " && ls -l /tmp/kit/parts"
            out.append({"command": command, "carry": carry, "seconds": seconds, "group": group["name"]})
    phases = phases_of(None)
    out.append(
        {
            "command": check_command(phases),
            "carry": [],
            "group": "-",
            "seconds": CALL_S + kit["tree_bytes"] / TRANSFER_BYTES_PER_S + sum(PHASES[p] for p in phases),
        }
    )
    for call in out:
        call["timeout_s"] = min(600, int(call["seconds"] * 1.5) + 30)
    return out


def timeline(kit: dict, kit_dir: Path) -> list[tuple[str, float]]:
    """(what, seconds since the first call) after each call, the cold start first."""
    clock, marks = COLD_START_S, [("cold start", COLD_START_S)]
    for i, call in enumerate(calls(kit, kit_dir), 1):
        clock += call["seconds"]
        if not call["carry"]:
            what = "phases"
        elif "gpu_check" in call["command"]:
            what = f"group {call['group']}'s last part, unpack, phases"
        else:
            what = f"a part of group {call['group']}"
        marks.append((f"call {i}: {what}", clock))
    return marks


def goals(kit: dict, kit_dir: Path) -> dict:
    """The timeline against the lease's goals: when the first results come back (group a's call), when the
    last phase ends, and whether the longest phase could run again in what is left."""
    marks = timeline(kit, kit_dir)
    first = next(clock for what, clock in marks if "group a's last part" in what)
    end = marks[-1][1]
    longest = max(PHASES, key=PHASES.get)
    return {
        "first_results_s": first,
        "end_s": end,
        "rerun_room_s": LEASE_S - end,
        "longest_phase": longest,
        "met": first <= FIRST_RESULTS_BY_S and end <= DONE_BY_S and LEASE_S - end >= PHASES[longest] + CALL_S,
    }


def print_plan(kit: dict, kit_dir: Path) -> None:
    parts = sum(len(g["parts"]) for g in kit["groups"])
    size = sum(g["bytes"] for g in kit["groups"]) / 2**20
    print(
        f"device kit in {kit_dir}: {parts} parts, {size:.0f} MiB ({kit['part_bytes'] >> 20} MiB a part, the working "
        f"tree {kit['tree_bytes'] / 2**20:.1f} MiB beside it), built in {kit['build_seconds']:.0f} s"
    )
    for group in kit["groups"]:
        print(
            f"  group {group['name']}: {', '.join(group['contents'])}: {len(group['parts'])} parts, "
            f"{group['bytes'] / 2**20:.0f} MiB; then phases {', '.join(phases_of(group['name']))}"
        )
    print(f"  and a call of its own: phases {', '.join(phases_of(None))}")
    print("Calls, back to back (the device tool's run: command, carry, timeout_s):")
    for i, call in enumerate(calls(kit, kit_dir), 1):
        print(f"  {i}. carry={call['carry']} timeout_s={call['timeout_s']}\n     {call['command']}")
    print(
        f"Timeline (estimated: cold start {COLD_START_S} s, {CALL_S} s a call, {TRANSFER_BYTES_PER_S / 1e6:.0f} MB/s):"
    )
    for what, clock in timeline(kit, kit_dir):
        print(f"  {clock / 60:5.1f} min  {what}")
    g = goals(kit, kit_dir)
    print(
        f"Goals: first results at {g['first_results_s'] / 60:.1f} min (by {FIRST_RESULTS_BY_S // 60}), every phase "
        f"done at {g['end_s'] / 60:.1f} (by {DONE_BY_S // 60}), {g['rerun_room_s'] / 60:.1f} min left for a rerun (the "
        f"longest phase, {g['longest_phase']}, takes {PHASES[g['longest_phase']] / 60:.1f}): "
        f"{'met' if g['met'] else 'NOT met'}"
    )
