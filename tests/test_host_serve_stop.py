"""Stopping the `sfc serve` that runs the embedded server while others use it (issue 37,
item 3): it says that it stops the server the others use, and how many; the attached serve
and the equipment say the server is gone and why; `sfc job list` says that attached serves
wait for it rather than "start one"; a new serve on the directory runs it again on the
same port and password, and they say it is back."""

from __future__ import annotations

import json
from pathlib import Path

from tests.clikit import processes, sfc

SCRIPT = {"default": "ok"}


def test_the_serve_that_stops_the_server_says_so_and_the_others_say_it_is_gone(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    script = tmp_path / "ok.json"
    script.write_text(json.dumps(SCRIPT))
    with processes(tmp_path / "logs") as procs:
        first = procs.serve(data, "--no-http", cwd=tmp_path)
        second = procs.serve(data, "--no-http", cwd=tmp_path)
        assert "attached to the server of" in second.stderr()
        equipment = procs.equipment(script, "default", data, cwd=tmp_path)
        assert first.stop() == 0
        said = first.stderr()
        assert (
            "with this serve: it stops the server that 1 other sfc serve(s) "
            f"(sfc serve pid {second.pid}) and " in said
        ), said
        assert "connection(s) of other processes (serves' workers, adapters) use; they " in said
        gone = (
            f"the server of {data} is gone: the sfc serve that ran it (pid {first.pid}) "
            f"stopped and removed {data / 'server.json'}"
        )
        second.wait_for_stderr(gone)
        equipment.wait_for_stderr(gone)
        listed = sfc("job", "list", "--data-dir", data, cwd=tmp_path)
        assert listed.code == 2, listed
        assert "Start one with" not in listed.err, listed
        assert (
            f"no server: the sfc serve that ran the server of {data} stopped (it removed "
            f"{data / 'server.json'}), and 1 sfc serve(s) attached to it (pid {second.pid}) "
            "wait for it" in listed.err
        ), listed
        third = procs.serve(data, "--no-http", cwd=tmp_path)
        back = f"the server of {data} is back: sfc serve pid {third.pid} runs it"
        second.wait_for_stderr(back)
        equipment.wait_for_stderr(back)
        assert sfc("job", "list", "--data-dir", data, cwd=tmp_path).code == 0
        assert (equipment.stop(), second.stop(), third.stop()) == (0, 0, 0)
        # the last one stopped alone: nothing to say about others
        assert "it stops the server that" not in third.stderr()
