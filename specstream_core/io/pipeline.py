"""Batch generation from a JSONL file to a JSONL file, with tokenization, generation and writing overlapped.

    summary = pipeline.run(engine, "prompts.jsonl", "out.jsonl", cfg, batch_size=8)

Three threads joined by bounded queues, so the model never waits on text work and memory stays flat:

    reader    input lines → parse → tokenize (its own tokenizer copy)        ─┐ queue (bounded)
    generator batches of up to B prompts → `engine.generate_batch` (or one   ─┤ queue (bounded)
              `engine.generate` per prompt when the engine has no batch API)  │
    writer    results → text (detokenized here unless the decoder did it) → JSON line → flush → progress bar

Input: one JSON object a line, `{"id": ..., "prompt": "..."}`; `id` a string or an integer, unique in
the file; blank lines are skipped. Other fields are kept: they come back in the output record under
`"extra"`. Output: one line per input line, in input order:
`{"id", "text", "token_ids", "stats", ["extra"]}`, or `{"id", "error", ["extra"]}` for a prompt that
cannot be generated.

Bad input, two kinds (every message names the line number):
- a line that cannot be tied to one id — invalid JSON, not an object, missing or bad `id`, a duplicate
  id, a missing or non-string `prompt` — aborts the run before the model is loaded or anything is
  written (all such lines listed, up to 20);
- a line with a good id whose prompt cannot be generated — empty, too long for the model's context
  with max_new_tokens, or holding a lone surrogate such as "\\ud800" in any field (valid JSON, but not
  text the tokenizer or a UTF-8 file can hold) — gets an error record in the output (and a line on
  stderr) and the run goes on. The run then exits non-zero, as it does whenever the output holds error
  records.
The input is UTF-8 (a leading byte-order mark is skipped); a line that is not names its line number.

Resume: ids already in the output (results and error records alike) are skipped and new lines appended;
rerunning a finished run does nothing. A truncated last line (a killed run) is cut off and rewritten; a
whole last record that only lacks its newline is kept. Any other unreadable output line is an error (the
file is not ours to guess about). To retry an error record, delete its line. One run at a time per
output file: a run holds an exclusive lock (flock) on the output file, and a second run on the same
output stops with an error instead of interleaving lines.

Failure: if any thread raises, every other thread stops at its next queue operation (all waits have
timeouts and watch a stop flag, so nothing hangs), the writer writes what was already generated, and
`PipelineError` reports the stage, the cause, how many records were written and the last id. Every
record is written whole with one write and a flush, so a crash never leaves a half line behind (a kill
may; see resume). At the end the written count is checked against the expected one: never a silently
short file.

Sampling: `engine.generate_batch` seeds row i of a batch with (seed or 0) + i, so sampled output
depends on the batch split; greedy output does not.
"""

from __future__ import annotations

import contextlib
import copy
import json
import queue
import sys
import threading
import time
import traceback
from dataclasses import dataclass

from specstream_core.model.chat import encode_prompt
from specstream_core.decoding.config import DecodeConfig, Result
from specstream_core.errors import SpecstreamError
from specstream_core.io.jsonl import (MAX_LISTED, RESERVED, _input_lines, _key, _output_record, _parse_line,  # noqa: F401
                                      check_unicode, not_unicode, scan_input, scan_output)

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX: no lock against a second run
    fcntl = None

POLL_S = 0.05  # how often a blocked thread checks the stop flag


class PipelineError(SpecstreamError):
    """A worker crashed; the message says which, why, and what was written."""


@dataclass
class Item:
    """One input line on its way through the pipeline."""
    seq: int  # position among the lines this run generates (the writer restores this order)
    line: int  # 1-based line number in the input file
    id: object
    prompt: str
    extra: dict
    prompt_ids: list[int] | None = None
    error: str | None = None
    result: Result | None = None


@dataclass
class Summary:
    written: int = 0  # records written by this run
    skipped: int = 0  # ids already in the output
    errors: int = 0  # error records written by this run
    errors_in_file: int = 0  # error records in the output, this run's and earlier ones
    last_id: object = None
    new_tokens: int = 0
    wall_s: float = 0.0
    repaired: bool = False


# ---- the three stages ---------------------------------------------------------------------------------
class _Stop(Exception):
    """Raised inside a worker when another one failed: leave quietly."""


class _Run:
    def __init__(self, engine, input_path, output_path, cfg: DecodeConfig, batch_size, queue_size, progress, done):
        self.engine, self.cfg, self.batch_size = engine, cfg, batch_size
        self.input_path, self.output_path, self.done_keys = input_path, output_path, done
        self.to_generate: queue.Queue = queue.Queue(maxsize=queue_size)
        self.to_write: queue.Queue = queue.Queue(maxsize=queue_size)
        self.stop = threading.Event()
        self.failure: tuple[str, BaseException] | None = None
        self.lock = threading.Lock()
        self.progress = progress
        self.summary = Summary()
        self.expected = 0  # set by the reader when it reaches the end

    # plumbing: every blocking call waits in short slices and gives up once another thread failed
    def _put(self, q: queue.Queue, obj) -> None:
        while True:
            if self.stop.is_set():
                raise _Stop
            try:
                q.put(obj, timeout=POLL_S)
                return
            except queue.Full:
                continue

    def _get(self, q: queue.Queue, drain: bool = False):
        """Next item; once another thread failed, _Stop at once (or, with drain, when q is empty)."""
        while True:
            if self.stop.is_set() and not drain:
                raise _Stop
            try:
                return q.get(timeout=POLL_S)
            except queue.Empty:
                if self.stop.is_set():
                    raise _Stop from None

    def _worker(self, stage: str, fn):
        def body():
            try:
                fn()
            except _Stop:
                pass
            except BaseException as exc:  # noqa: BLE001 - any crash ends the run, reported by run()
                with self.lock:
                    if self.failure is None:
                        self.failure = (stage, exc)
                self.stop.set()
        return threading.Thread(target=body, name=f"pipeline-{stage}", daemon=True)

    # 1. reader / tokenizer
    def read(self) -> None:
        tokenizer = _own_copy(self.engine.tokenizer)
        seq = 0
        with open(self.input_path, encoding="utf-8-sig", newline="\n") as f:  # lines exactly as scan_input's
            for line, text in enumerate(f, start=1):
                if not text.strip():
                    continue
                rec, problem = _parse_line(text, line)
                if problem:  # the file changed since the scan
                    raise SpecstreamError(problem)
                if _key(rec["id"]) in self.done_keys:
                    continue
                extra = {k: v for k, v in rec.items() if k not in RESERVED}
                item = Item(seq, line, rec["id"], rec["prompt"], extra)
                try:
                    check_unicode(rec)  # a poisoned line becomes an error record; the run goes on
                    item.prompt_ids = self._encode(tokenizer, rec["prompt"])
                except SpecstreamError as exc:
                    item.error = str(exc)
                    if not_unicode(extra):
                        item.extra = {}  # it could not be written
                self._put(self.to_generate, item)
                seq += 1
        self.expected = seq
        self._put(self.to_generate, None)

    def _encode(self, tokenizer, prompt: str) -> list[int]:
        if not prompt.strip():
            raise SpecstreamError("the prompt is empty")
        if tokenizer is None:
            raise SpecstreamError("the engine has no tokenizer")
        ids = encode_prompt(tokenizer, prompt, getattr(self.engine, "chat", True))  # as Engine.encode
        self.engine.check_length(len(ids), self.cfg.max_new_tokens)
        return ids

    # 2. generation
    def generate(self) -> None:
        batched = callable(getattr(self.engine, "generate_batch", None))
        finished = False
        while not finished:
            batch = []
            while len(batch) < self.batch_size:
                item = self._get(self.to_generate)
                if item is None:
                    finished = True
                    break
                batch.append(item)
            ready = [it for it in batch if it.error is None]
            if ready:
                prompts = [it.prompt_ids for it in ready]
                if batched:
                    results = self.engine.generate_batch(prompts, self.cfg)
                else:
                    results = [self.engine.generate(p, self.cfg) for p in prompts]
                if len(results) != len(ready):
                    raise RuntimeError(f"the engine returned {len(results)} results for {len(ready)} prompts")
                for it, res in zip(ready, results):
                    it.result = res
            for it in batch:
                self._put(self.to_write, it)
        self._put(self.to_write, None)

    # 3. writer / detokenizer
    def write(self) -> None:
        waiting: dict[int, Item] = {}  # arrived out of order (not today: one generator), held until their turn
        bar = _progress_bar(self.progress)
        try:
            with open(self.output_path, "a", encoding="utf-8") as out:
                next_seq, failed = 0, False
                while True:
                    try:
                        item = self._get(self.to_write, drain=True)
                    except _Stop:  # another stage failed: what is already here still gets written, in order
                        failed = True
                        break
                    if item is None:
                        break
                    waiting[item.seq] = item
                    while next_seq in waiting:
                        self._write_one(out, waiting.pop(next_seq), bar)
                        next_seq += 1
                if failed:
                    raise _Stop
        finally:
            if bar is not None:
                bar.close()

    def _write_one(self, out, item: Item, bar) -> None:
        record = {"id": item.id}
        if item.error is not None:
            record["error"] = item.error
            print(f"warning: input line {item.line} (id {json.dumps(item.id)}): {item.error}; "
                  f"written as an error record", file=sys.stderr)
        else:
            res = item.result
            text = res.text if isinstance(res.text, str) else self.engine.decode_text(res.token_ids)
            record.update(text=text, token_ids=list(res.token_ids), stats=res.stats)
        if item.extra:
            record["extra"] = item.extra
        out.write(_json_line(record))  # one write per record: whole lines only
        out.flush()
        s = self.summary
        s.written += 1
        s.last_id = item.id
        if item.error is not None:
            s.errors += 1
        else:
            s.new_tokens += len(item.result.token_ids)
        if bar is not None:
            bar.update(1)


def _json_line(record: dict) -> str:
    """One JSON line; ASCII-escaped when the record holds text UTF-8 cannot encode (a lone surrogate in an id)."""
    line = json.dumps(record, ensure_ascii=False)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        line = json.dumps(record)  # "\ud800" escapes: still one valid JSON line that reads back the same
    return line + "\n"


def _own_copy(tokenizer):
    """The reader tokenizes on its own copy: a fast tokenizer is not safe to share across threads."""
    if tokenizer is None:
        return None
    try:
        return copy.deepcopy(tokenizer)
    except Exception:  # noqa: BLE001 - an uncopyable tokenizer is still usable, just shared
        return tokenizer


def _progress_bar(total):
    if not total:
        return None
    from tqdm import tqdm

    return tqdm(total=total, file=sys.stderr, unit="prompt", dynamic_ncols=True, desc="generate-batch")


# ---- the run --------------------------------------------------------------------------------------------
def run(engine, input_path: str, output_path: str, cfg, batch_size: int = 8, queue_size: int | None = None,
        progress: bool = True) -> Summary:
    """Generate every prompt of `input_path` not yet in `output_path`; see the module docstring.

    `engine` may be an Engine or a callable returning one (loaded only when there is work to do); `cfg` a
    DecodeConfig or a callable returning one, called after the engine is loaded.
    """
    if not 1 <= batch_size <= 256:
        raise SpecstreamError(f"batch size must be between 1 and 256, got {batch_size}")
    total = scan_input(input_path)
    with _output_lock(output_path):  # one run per output file
        return _resume(engine, input_path, output_path, cfg, batch_size, queue_size, progress, total)


@contextlib.contextmanager
def _output_lock(path: str):
    """An exclusive, non-blocking flock on the output file for the whole run (released if the process dies)."""
    try:
        f = open(path, "ab")
    except OSError as exc:
        raise SpecstreamError(f"cannot open the output file {path}: {exc.strerror or exc}") from None
    with f:
        if fcntl is not None:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise SpecstreamError(f"another run is writing to {path} (the file is locked); wait for it to finish, "
                                      f"or choose another output file") from None
            except OSError:  # a filesystem without locks (some network mounts): run unguarded
                print(f"warning: cannot lock {path}; make sure no other run writes to it", file=sys.stderr)
        yield  # closing the file releases the lock


def _resume(engine, input_path: str, output_path: str, cfg: DecodeConfig, batch_size: int, queue_size: int | None,
            progress: bool, total: int) -> Summary:
    done, old_errors, last, repaired = scan_output(output_path)
    if repaired:
        print(f"note: {output_path} ended in a truncated line (an interrupted run); it was cut off and that "
              f"prompt will be generated again", file=sys.stderr)
    todo = _count_todo(input_path, done)
    summary = Summary(skipped=total - todo, errors_in_file=old_errors, last_id=last, repaired=repaired)
    if todo == 0:
        return summary
    if callable(engine) and not hasattr(engine, "generate"):
        engine = engine()
    if callable(cfg):  # settings that depend on the loaded engine (its stream set's recommended tree)
        cfg = cfg()
    work = _Run(engine, input_path, output_path, cfg, batch_size, queue_size or 4 * batch_size,
                todo if progress else 0, done)
    work.summary = summary
    threads = [work._worker("reader", work.read), work._worker("generator", work.generate),
               work._worker("writer", work.write)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    try:
        while any(t.is_alive() for t in threads) and not work.stop.is_set():
            threads[-1].join(timeout=POLL_S)
    except KeyboardInterrupt:
        work.stop.set()
        threads[-1].join(timeout=10)
        raise PipelineError(f"interrupted; {_written(work, output_path)}; rerun the same command to resume") from None
    threads[-1].join(timeout=10)  # the writer flushes what was generated before any failure
    summary.wall_s = time.perf_counter() - t0
    summary.errors_in_file += summary.errors
    if work.failure is not None:
        stage, exc = work.failure
        if not isinstance(exc, SpecstreamError):
            sys.stderr.write(f"{stage} thread traceback:\n" + "".join(traceback.format_exception(exc)))
        cause = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise PipelineError(f"the {stage} stage failed: {type(exc).__name__}: {cause}; "
                            f"{_written(work, output_path)}; rerun the same command to resume")
    if threads[-1].is_alive():
        raise PipelineError(f"the writer did not finish; {_written(work, output_path)}")
    if summary.written != todo:  # never a silently short file
        raise PipelineError(f"expected {todo} records but wrote {summary.written}; {_written(work, output_path)}")
    return summary


def _count_todo(path: str, done: set[str]) -> int:
    todo = 0
    with open(path, encoding="utf-8-sig", newline="\n") as f:
        for text in f:
            if text.strip() and _key(json.loads(text)["id"]) not in done:
                todo += 1
    return todo


def _written(work: _Run, output_path: str) -> str:
    s = work.summary
    last = json.dumps(s.last_id) if s.last_id is not None else "none"
    return f"this run wrote {s.written} record(s) to {output_path} (last id in the file: {last})"
