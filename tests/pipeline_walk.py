"""A pipeline's schedule walked micro-batch by micro-batch: the reference that
``tenet_byoc.compose``'s closed form is checked against."""


def pipeline_seconds(stage_seconds: list[float], p2p_seconds: float,
                     micro_batches: int) -> tuple[float, float]:
    """Critical path and bubble of one step through the pipeline.

    Each of ``micro_batches`` passes every stage in order (``stage_seconds`` per micro-batch,
    ``p2p_seconds`` between consecutive stages); a stage starts a micro-batch when it is free
    and the previous stage has handed it over. Returns (critical path, bubble), the bubble
    being the critical path less the busiest stage's own work (``micro_batches x max``).
    """
    finish = [0.0] * len(stage_seconds)
    for _ in range(micro_batches):
        ready = 0.0
        for s, t in enumerate(stage_seconds):
            start = max(finish[s], ready)
            finish[s] = start + t
            ready = finish[s] + p2p_seconds
    critical = finish[-1]
    return critical, critical - micro_batches * max(stage_seconds)
