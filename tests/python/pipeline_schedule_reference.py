"""The compute order torch.distributed.pipelining runs per rank, for tests/pipeline_schedule_test.cpp.

Prints one line per schedule of the grid the test checks (ranks 1..4, microbatches 1..8, stages per
rank 1..3 for interleaved): "NAME RANKS MICROBATCHES STAGES_PER_RANK: ROW;ROW;..." where each ROW is a
rank's forward/backward actions comma separated ("2F0,1B3"), in the order torch runs them, or
"NAME RANKS MICROBATCHES STAGES_PER_RANK refused: MESSAGE" where torch refuses the counts.

GPipe and 1F1B: the order Schedule{GPipe,1F1B}._step_microbatches calls forward_one_chunk and
backward_one_chunk on a recording stand-in stage (no process group: every p2p op list is empty).
Their pipeline_order drawing is not used: torch 2.11's Schedule1F1B._get_pipeline_order numbers the
last rank's forwards from 1 (1F1 .. 1F4 for 4 microbatches), not what it runs.
Interleaved 1F1B: the compute actions of ScheduleInterleaved1F1B.pipeline_order, which its runtime
(_PipelineScheduleRuntime) executes, built from stand-in stages.
"""
import sys
from types import SimpleNamespace

from torch.distributed.pipelining.schedules import (Schedule1F1B, ScheduleGPipe,
                                                    ScheduleInterleaved1F1B, _ComputationType)


class RecordingStage:
    """Just enough of _PipelineStageBase for _step_microbatches: records each compute call."""

    def __init__(self, index, stages):
        self.stage_index, self.num_stages, self.group_size = index, stages, stages
        self.group_rank = index
        self.is_first, self.is_last = index == 0, index == stages - 1
        self.has_backward = True
        self.calls = []

    def forward_one_chunk(self, mb, *args, **kwargs):
        self.calls.append(f"{self.stage_index}F{mb}")

    def backward_one_chunk(self, mb, *args, **kwargs):
        self.calls.append(f"{self.stage_index}B{mb}")

    def __getattr__(self, name):
        if name.endswith("_ops"):
            return lambda *args, **kwargs: []
        return lambda *args, **kwargs: None


def single_stage_order(schedule_class, ranks, microbatches):
    rows = []
    for rank in range(ranks):
        stage = RecordingStage(rank, ranks)
        schedule = schedule_class(stage, microbatches)
        schedule._check_inputs = lambda a, k, t, l: (a, k)
        schedule._maybe_compute_loss = lambda *args: None
        schedule._maybe_get_loss = lambda *args: None
        schedule._update_losses = lambda *args: None
        schedule._step_microbatches([()] * microbatches, [{}] * microbatches)
        rows.append(stage.calls)
    return rows


def interleaved_order(ranks, microbatches, stages_per_rank):
    stages = [SimpleNamespace(num_stages=ranks * stages_per_rank, group_size=ranks, group_rank=0,
                              stage_index=i * ranks) for i in range(stages_per_rank)]
    schedule = ScheduleInterleaved1F1B(stages, microbatches)
    compute = (_ComputationType.FORWARD, _ComputationType.FULL_BACKWARD)
    return [[str(a) for a in schedule.pipeline_order[rank] if a is not None and a.computation_type in compute]
            for rank in range(ranks)]


def order(name, ranks, microbatches, stages_per_rank):
    if name == "gpipe":
        return single_stage_order(ScheduleGPipe, ranks, microbatches)
    if name == "1f1b":
        return single_stage_order(Schedule1F1B, ranks, microbatches)
    return interleaved_order(ranks, microbatches, stages_per_rank)


def main():
    for name in ("gpipe", "1f1b", "interleaved"):
        for ranks in range(1, 5):
            for microbatches in range(1, 9):
                for stages_per_rank in (1, 2, 3) if name == "interleaved" else (1,):
                    head = f"{name} {ranks} {microbatches} {stages_per_rank}"
                    try:
                        rows = order(name, ranks, microbatches, stages_per_rank)
                    except ValueError as error:
                        print(f"{head} refused: {error}")
                        continue
                    print(f"{head}: " + ";".join(",".join(row) for row in rows))


if __name__ == "__main__":
    main()
