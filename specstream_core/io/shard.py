"""`generate-batch` across processes: `accelerate launch` (or torchrun) runs one copy per rank.

    accelerate launch --num_processes 2 --cpu -m specstream_core generate-batch --input in.jsonl --output out.jsonl
    accelerate launch --num_processes 8 -m specstream_core generate-batch --device cuda ...   # one GPU per rank

The launcher sets RANK / WORLD_SIZE / LOCAL_RANK (a plain run sets none: world size 1, and generate-batch
does not come here). With W ranks:

1. every rank checks the whole input (`pipeline.scan_input`: bad lines abort before anything runs, with
   their real line numbers) and reads the ids already merged into the output;
2. rank r takes the prompts whose position in the input (blank lines not counted) is r modulo W, minus
   those already in the output, and writes them to `<output>.shards/input-r-of-W.jsonl`;
3. each rank runs the ordinary pipeline on its share into `<output>.shards/output-r-of-W.jsonl` (its own
   lock, its own resume: a killed run, rerun with the same W, picks up every shard where it stopped);
4. the ranks meet (a gloo process group: one all-gather of each rank's outcome); when every rank
   succeeded, rank 0 appends the shards' records to the output in input order, under the output's lock,
   then deletes the shard directory. A merge cut short is finished by the next run (ids already in
   the output are skipped everywhere). When a rank failed, nothing is merged and every rank exits 2.

Resume needs the same W (shard files are named by it; another W starts its shards afresh, skipping what
is already merged). A poisoned prompt's stderr warning names its line in the rank's shard input file;
its error record, like every record, carries its id. On a GPU machine (`--device cuda`) rank r uses
`cuda:LOCAL_RANK`. Greedy output equals a one-process run
token for token; sampled output depends on the batch split, as in one process (see pipeline.py).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from datetime import timedelta

from specstream_core.io import pipeline
from specstream_core.errors import SpecstreamError

MEET_TIMEOUT = timedelta(days=7)  # ranks wait for the slowest one at the end; generation may take long


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0


def world() -> World:
    """This process's place, from the launcher's environment (torchrun, accelerate launch)."""
    try:
        size = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", str(rank)))
    except ValueError:
        raise SpecstreamError("RANK / WORLD_SIZE / LOCAL_RANK must be integers") from None
    if size < 1 or not 0 <= rank < size:
        raise SpecstreamError(f"bad launcher environment: RANK={rank}, WORLD_SIZE={size}")
    return World(rank, size, local)


def shard_dir(output_path: str) -> str:
    return output_path + ".shards"


def shard_paths(output_path: str, w: World) -> tuple[str, str]:
    """(input, output) files of rank w.rank."""
    d = shard_dir(output_path)
    tag = f"{w.rank}-of-{w.size}"
    return os.path.join(d, f"input-{tag}.jsonl"), os.path.join(d, f"output-{tag}.jsonl")


def _prompts(input_path: str):
    """(position, id key, line text) of each prompt line, blank lines skipped."""
    position = 0
    for _, text in pipeline._input_lines(input_path):
        if not text.strip():
            continue
        rec = json.loads(text)
        yield position, pipeline._key(rec["id"]), text
        position += 1


def _merged_ids(output_path: str) -> set[str]:
    """Ids already in the final output (read only: rank 0 repairs a cut last line when it merges)."""
    done = set()
    if not os.path.exists(output_path):
        return done
    with open(output_path, "rb") as f:
        for raw in f:
            rec = pipeline._output_record(raw)
            if rec is not None and raw.endswith(b"\n"):
                done.add(pipeline._key(rec["id"]))
    return done


def write_share(input_path: str, output_path: str, w: World) -> tuple[str, str, int]:
    """Rank w's share of the input, written to its shard input file; (shard input, shard output, prompts)."""
    shard_in, shard_out = shard_paths(output_path, w)
    os.makedirs(os.path.dirname(shard_in), exist_ok=True)
    merged = _merged_ids(output_path)
    count = 0
    tmp = f"{shard_in}.tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for position, key, text in _prompts(input_path):
            if position % w.size == w.rank and key not in merged:
                f.write(text if text.endswith("\n") else text + "\n")
                count += 1
    os.replace(tmp, shard_in)
    return shard_in, shard_out, count


def merge(input_path: str, output_path: str, size: int) -> pipeline.Summary:
    """Append every shard record not yet in the output, in input order; returns what the output now holds."""
    records: dict[str, bytes] = {}
    for rank in range(size):
        _, shard_out = shard_paths(output_path, World(rank, size))
        if not os.path.exists(shard_out):
            continue
        with open(shard_out, "rb") as f:
            for raw in f:
                rec = pipeline._output_record(raw)
                if rec is not None and raw.endswith(b"\n"):
                    records[pipeline._key(rec["id"])] = raw
    summary = pipeline.Summary()
    with pipeline._output_lock(output_path):
        done, _, _, _ = pipeline.scan_output(output_path)  # also cuts a line a killed merge left half written
        missing = []
        with open(output_path, "ab") as out:
            for _, key, _ in _prompts(input_path):
                if key in done:
                    summary.skipped += 1
                elif key in records:
                    out.write(records[key])
                    out.flush()
                    summary.written += 1
                else:
                    missing.append(key)
        if missing:
            raise pipeline.PipelineError(f"{len(missing)} id(s) have no record in any shard (first: {missing[0]}); "
                                         f"the shards stay in {shard_dir(output_path)}; rerun to resume")
        _, summary.errors_in_file, summary.last_id, _ = pipeline.scan_output(output_path)
    return summary


def _meet(w: World, outcome: dict) -> list[dict]:
    """Every rank's outcome, once all ranks got here (a gloo group, whatever the device)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=w.rank, world_size=w.size, timeout=MEET_TIMEOUT)
    gathered: list = [None] * w.size
    dist.all_gather_object(gathered, outcome)
    return gathered


def _leave() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def run(load, input_path: str, output_path: str, cfg, batch_size: int = 8, progress: bool = True,
        w: World | None = None) -> tuple[pipeline.Summary, pipeline.Summary | None]:
    """This rank's share through the pipeline, then (rank 0) the merge. (this rank's summary, the merged
    output's summary on rank 0 or None). Raises on every rank when any rank failed."""
    w = w or world()
    outcome: dict = {"rank": w.rank}
    mine = pipeline.Summary()
    try:
        pipeline.scan_input(input_path)  # bad lines: every rank stops here with the real line numbers
        shard_in, shard_out, count = write_share(input_path, output_path, w)
        if count:
            mine = pipeline.run(load, shard_in, shard_out, cfg, batch_size=batch_size,
                                progress=progress and w.rank == 0)
        outcome.update(written=mine.written, new_tokens=mine.new_tokens, wall_s=mine.wall_s)
    except Exception as exc:  # noqa: BLE001 - reported to every rank below, so none waits for a dead one
        outcome["error"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    everyone = _meet(w, outcome)
    _leave()  # the group's work is done; a process that exits with it alive aborts in gloo's threads
    failed = [o for o in everyone if "error" in o]
    if failed:
        listed = "; ".join(f"rank {o['rank']}: {o['error']}" for o in failed)
        raise SpecstreamError(f"{len(failed)} of {w.size} rank(s) failed, nothing was merged into {output_path} "
                              f"(the shards stay in {shard_dir(output_path)}; rerun the same command to resume): "
                              f"{listed}")
    if w.rank != 0:
        return mine, None
    merged = merge(input_path, output_path, w.size)
    merged.new_tokens = sum(o["new_tokens"] for o in everyone)
    merged.wall_s = max(o["wall_s"] for o in everyone)
    shutil.rmtree(shard_dir(output_path), ignore_errors=True)
    return mine, merged


def run_command(args, load, cfg) -> int:
    """generate-batch's body when launched with WORLD_SIZE > 1; messages from rank 0 only."""
    w = world()
    if str(args.device).startswith("cuda") and ":" not in str(args.device):
        args.device = f"cuda:{w.local_rank}"
    mine, merged = run(load, args.input, args.output, cfg, batch_size=args.batch_size,
                       progress=not args.no_progress, w=w)
    if merged is None:
        return 0
    print(f"{w.size} ranks: merged {merged.written} record(s) into {args.output} in input order "
          f"({merged.skipped} already there; {merged.new_tokens} new tokens, slowest rank {merged.wall_s:.1f}s)",
          file=sys.stderr)
    if merged.errors_in_file:
        print(f"error: {args.output} holds {merged.errors_in_file} error record(s) (prompts that could not be "
              f"generated; see their \"error\" field)", file=sys.stderr)
        return 1
    return 0
