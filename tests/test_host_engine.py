"""The host on a real server: jobs run to the end through workers and the equipment stream."""

from __future__ import annotations

from host.joborder import job_response, path_text
from tests.hostkit import Host, linear_recipe


def test_push_recipe_runs_to_completed_through_two_instances(host: Host) -> None:
    scope = host.scope("two")
    jobs = [host.submit(scope, linear_recipe(3), job_id=f"j{i}").job for i in range(6)]
    a, b = host.worker([scope]), host.worker([scope])
    responder = host.responder(scope)
    host.run([a, b], [responder], host.ended(scope, jobs))
    for job in jobs:
        order = host.order(scope, job)
        assert path_text(order) == "Ended/Completed"
        response = job_response(order)
        data = {p.id: p.value for p in response.job_response_data}
        assert data["endedBy"] == "completed"
        assert data["outcomes"] == ["ok"]
        assert response.start_time is not None and response.end_time is not None
    # both instances applied some of the work
    assert a.counters.outcome.applied > 0 and b.counters.outcome.applied > 0
    pushes = [d for _, kind, d in host.equipment(scope) if kind == "push"]
    assert len(pushes) == 3 * len(jobs)
