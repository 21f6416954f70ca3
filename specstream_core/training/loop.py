"""The one training loop: stream training (`streams.py`), Medusa heads (`medusa.py`) and
pretraining (`pretrain.py`) each supply a step function and run `TrainLoop.run`.

    repeat until `steps` are done or the time budget is spent:
        set the learning rate (lr_at, if given)  → loss = step_fn(step)  → backward  → clip
        → optimizer step  → scheduler step  → log record every `log_every` steps
        → checkpoint every `checkpoint_every` steps / `checkpoint_minutes`
    a time budget that runs out leaves a checkpoint (when the run checkpoints) to resume from;
    every `eval_every` steps the trainer's `evaluate` adds an evaluation record (draft quality against training time).

The budget counts the steps' own time (`elapsed`), which a resumed run may carry over. Everything a
resumed run needs to be bit-identical (optimizer, scheduler, data order) is the trainer's to save in
its `checkpoint` callback; the loop only says when.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch


def linear_schedule(warmup: int, steps: int, floor: float = 0.05) -> Callable[[int], float]:
    """Learning-rate factor: linear warm-up, then linear decay to `floor` (the paper's linear schedule)."""
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(floor, 1 - (step - warmup) / max(1, steps - warmup))
    return factor


@dataclass
class LoopState:
    step: int = 0  # steps done
    elapsed: float = 0.0  # seconds spent in steps (carried over by a resumed run when the trainer says so)
    tokens: int = 0
    history: list[dict] = field(default_factory=list)  # log records (and evaluation records, `TrainLoop.evaluate`)
    seconds_before: float = 0.0  # step time of the runs a resumed one continues (records carry the sum: "seconds")

    def seconds(self) -> float:
        """Training time so far, every run's steps together."""
        return self.seconds_before + self.elapsed


@dataclass
class TrainLoop:
    optimizer: torch.optim.Optimizer
    params: list  # what the gradient norm is clipped over
    steps: int | None  # stop after this many steps (None: only the time budget stops)
    minutes: float = 0.0  # time budget (0: none)
    log_every: int = 10
    scheduler: object | None = None  # stepped after each optimizer step
    lr_at: Callable[["TrainLoop"], float] | None = None  # or: set every group's lr before each step
    backward: Callable[[torch.Tensor], None] | None = None  # default loss.backward() (accelerate passes its own)
    checkpoint: Callable[["LoopState"], None] | None = None
    checkpoint_every: int = 0  # steps
    checkpoint_minutes: float | None = None  # None: by steps only (0: after every step)
    evaluate: Callable[["LoopState"], dict] | None = None  # draft quality now, recorded every `eval_every` steps
    eval_every: int = 0  # (its time is not the steps' time: "seconds" stays the training time)
    progress: bool = True
    desc: str = "train"
    log: Callable[[str], None] = print
    state: LoopState = field(default_factory=LoopState)

    def fraction(self) -> float:
        """How much of the run is done, by steps or time budget, whichever is further."""
        done = self.state.elapsed / (self.minutes * 60) if self.minutes else 0.0
        return max(done, self.state.step / self.steps) if self.steps else done

    def _over_budget(self) -> bool:
        return bool(self.minutes) and self.state.elapsed >= self.minutes * 60

    def run(self, step_fn: Callable[[int], tuple[torch.Tensor, dict, int]]) -> LoopState:
        """step_fn(step) -> (loss, parts: name -> tensor, tokens in the batch). Returns the state."""
        from tqdm.auto import tqdm

        st = self.state
        bar = tqdm(total=self.steps, initial=st.step, disable=not self.progress, desc=self.desc, unit="step")
        last_ckpt, saved_at = time.monotonic(), st.step
        self._evaluate_at_start()
        while not (self.steps is not None and st.step >= self.steps) and not self._over_budget():
            t0 = time.perf_counter()
            if self.lr_at is not None:
                for group in self.optimizer.param_groups:
                    group["lr"] = self.lr_at(self)
            loss, parts = self._one_step(step_fn, st.step)
            st.elapsed += time.perf_counter() - t0
            self._record(loss, parts, bar)
            st.step += 1
            bar.update(1)
            if self.evaluate is not None and self.eval_every and st.step % self.eval_every == 0:
                self._evaluate_now()
            if self.checkpoint is not None and self._checkpoint_due(last_ckpt):
                self.checkpoint(st)
                last_ckpt, saved_at = time.monotonic(), st.step
            if self._over_budget():
                self.log(f"time budget reached after {st.step} steps")
                if self.checkpoint is not None and saved_at != st.step and (self.steps is None or st.step < self.steps):
                    self.checkpoint(st)
                break
        bar.close()
        return st

    def _evaluate_now(self) -> None:
        st = self.state
        st.history.append({"step": st.step, "seconds": st.seconds(), "eval": self.evaluate(st)})

    def _evaluate_at_start(self) -> None:
        """Where the curve starts: the streams as the run (or the resumed one) begins, unless a record has them."""
        st = self.state
        if self.evaluate is not None and self.eval_every and not any(
                "eval" in r and r["step"] == st.step for r in st.history):
            self._evaluate_now()

    def _one_step(self, step_fn, step: int):
        loss, parts, tokens = step_fn(step)
        (self.backward or torch.Tensor.backward)(loss)
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.state.tokens += tokens
        return loss, parts

    def _record(self, loss: torch.Tensor, parts: dict, bar) -> None:
        """The log record of every `log_every`-th step and of the last (one host sync when it logs)."""
        step = self.state.step
        if step % self.log_every and not (self.steps is not None and step == self.steps - 1):
            return
        record = {"step": step, "loss": loss.item(), **{k: v.item() for k, v in parts.items()},
                  "tokens_per_s": self.state.tokens / max(1e-9, self.state.elapsed), "seconds": self.state.seconds()}
        self.state.history.append(record)
        bar.set_postfix(loss=f"{record['loss']:.3f}", tok_s=f"{record['tokens_per_s']:.0f}")

    def _checkpoint_due(self, last: float) -> bool:
        if self.checkpoint_every and self.state.step % self.checkpoint_every == 0:
            return True
        return self.checkpoint_minutes is not None and time.monotonic() - last >= self.checkpoint_minutes * 60
