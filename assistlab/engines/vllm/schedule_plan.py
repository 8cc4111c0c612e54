"""The check of a schedule of draft lengths, as vLLM plans it: which arms a schedule varies, the comparison that
times it beside each level's best fixed K (all at once, or one level at a time), and its record in the report.
What the timed comparison says is results/schedule.judge(report, plan)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...config import BenchRequest
from ...errors import InputError
from .arms import VllmArm
from .schedule import RULE, Schedule


def started_servers(arms) -> int:
    """How many vLLM servers a comparison of these arms starts: one per vLLM arm that is not an operator's."""
    return sum(1 for arm in arms if isinstance(arm, VllmArm) and arm.url is None)


@dataclass(frozen=True)
class SchedulePlan:
    """The comparison that checks a schedule: `request` times plain, each level's best fixed K and the schedule
    under load at the levels of `best` ({level: best K}); `arm` (the one with the schedule) and `fixed` ({level:
    arm}) say which of its arms is which (each arm's to_dict() is its `spec` in the report, the one rule
    results.schedule matches arms by)."""

    request: BenchRequest
    arm: VllmArm
    fixed: dict[int, VllmArm]
    best: dict[int, int]

    @classmethod
    def build(cls, base: BenchRequest, template: VllmArm, best: dict[int, int],
              max_batch: int | None = None) -> SchedulePlan:
        """The check of the schedule built from `best` ({level: best K}, 0 where plain was best) for `template`'s
        method and settings (its draft model, lookup window): plain, one arm per distinct best K above 0, and the
        schedule arm, at the levels of `best`, `base.load_rounds` rounds each (in blocks of one round, unless
        `base.load_block_rounds` says); one untimed single request per arm (the load phase's own warm-up rounds
        warm each level). `max_batch`: as Schedule.from_levels takes it."""
        if template.url is not None or not template.assisted:
            raise InputError("A schedule is checked for a speculative method AssistLab starts a server for (ngram, "
                             "draft_model, eagle, eagle3, mtp, suffix), not plain or an operator's server.")
        schedule = Schedule.from_levels(best, max_batch)
        levels = tuple(sorted(best))
        like = {"prompt_lookup_min": template.prompt_lookup_min, "prompt_lookup_max": template.prompt_lookup_max,
                "draft_model": template.draft_model}
        fixed = {level: VllmArm(template.method, best[level], **like) for level in levels if best[level] > 0}
        scheduled = VllmArm(template.method, **like, schedule=schedule)
        arms = (VllmArm("plain"), *dict.fromkeys(fixed.values()), scheduled)
        # In blocks (servers one at a time) each round is a block of its own, so the ratio's interval has as many
        # units as rounds (results/schedule.py), at a server start each; all at once the setting is not used.
        request = dataclasses.replace(base, arms=arms, engines=("vllm",), concurrency=levels, repeats=1, warmup=0,
                                      stop_rule="fixed", precision=None, max_time_s=None,
                                      load_block_rounds=base.load_block_rounds or 1)
        return cls(request, scheduled, fixed, dict(best))

    @property
    def schedule(self) -> Schedule:
        """The ranges checked: the one schedule built from every level, in each per-level part too."""
        return self.arm.schedule

    def ks(self) -> dict[int, int]:
        """The schedule's K at each level checked."""
        return {level: self.schedule.k_at(level) for level in sorted(self.best)}

    def specs(self) -> tuple[dict, dict[int, dict]]:
        """(the schedule arm's spec, {level: its best fixed arm's spec}): how the report names them."""
        return self.arm.to_dict(), {level: arm.to_dict() for level, arm in self.fixed.items()}

    def per_level(self) -> list[SchedulePlan]:
        """The same check as one comparison per level: plain, that level's best fixed K (none where plain was
        best) and the schedule, each served at that level alone. The schedule (its ranges) stays the one built
        from every level. At most three servers at once, where the whole check starts two plus one per
        distinct best K."""
        parts = []
        for level in sorted(self.best):
            fixed = {level: self.fixed[level]} if level in self.fixed else {}
            arms = (VllmArm("plain"), *fixed.values(), self.arm)
            request = dataclasses.replace(self.request, arms=arms, concurrency=(level,))
            parts.append(SchedulePlan(request, self.arm, fixed, {level: self.best[level]}))
        return parts

    def parts(self, max_servers: int | None = None) -> list[SchedulePlan]:
        """The comparisons that time the check: itself, or one per level (per_level) where it would start more
        servers at once than `max_servers` (None: no limit)."""
        if max_servers is None or started_servers(self.request.arms) <= max_servers:
            return [self]
        return self.per_level()

    def record(self) -> dict:
        """The report's `tune.schedule`: the method, each level's best K, the ranges and their rule, and the
        --speculative-config the check's server was started with."""
        return {"method": self.arm.method, "best_k_by_level": {str(c): k for c, k in sorted(self.best.items())},
                "ranges": self.schedule.as_list(), "text": self.schedule.text(), "label": self.arm.label,
                "rule": RULE, "speculative_config": self.arm.speculative_config()}


class VllmSchedules:
    """vLLM as the engine whose arms take a schedule of draft lengths (the registry's SCHEDULES): what the
    scheduler asks of it, without naming the engine."""

    def schedule_family(self, arm) -> tuple | None:
        """What a schedule keeps while its draft length varies by batch size: (method, lookup min, lookup max,
        draft model) of a speculative method AssistLab starts a server for; None for plain, an operator's
        server, another engine's arm or an arm that already has a schedule."""
        if not isinstance(arm, VllmArm) or not arm.assisted or arm.url is not None or arm.schedule is not None:
            return None
        return arm.method, arm.prompt_lookup_min, arm.prompt_lookup_max, arm.draft_model

    def plan(self, base: BenchRequest, template: VllmArm, best: dict[int, int],
             max_batch: int | None = None) -> SchedulePlan:
        """The check of the schedule built from `best` for `template`'s method: SchedulePlan.build."""
        return SchedulePlan.build(base, template, best, max_batch)

    def started_servers(self, arms) -> int:
        """How many servers a comparison of these arms starts (the module's started_servers)."""
        return started_servers(arms)
