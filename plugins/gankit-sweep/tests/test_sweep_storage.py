"""gankit sweep's storages as clusters use them: every database URL form with the driver that is
installed, the password never in a printed line, many workers started at once on a new
database, and workers killed mid-trial - against a real PostgreSQL server this test starts
(initdb + pg_ctl on a temporary folder, a free loopback port) when the server binaries are
installed (``.ci/run`` installs them; ``GANKIT_REQUIRE_POSTGRES=1`` makes their absence a
failure instead of a skip)."""

from __future__ import annotations

import glob
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner

from sweep_cli import CONST_METRIC, cli
from gan_kit import GankitError
from gankit_sweep import storage as stg
from gankit_sweep import trials as tr
from gan_kit.testing import TINY_RECIPE

PASSWORD = "s3cret-pw"
CLOSED = "127.0.0.1:9"  # nothing listens on the discard port


def hide(monkeypatch, *modules):
    """As if the DBAPI ``modules`` were not installed."""
    real = stg._installed
    monkeypatch.setattr(stg, "_installed", lambda m: m not in modules and real(m))


# ----------------------------------------------------------------------- URL forms --


@pytest.mark.parametrize("url, hidden, expected", [
    # SQLAlchemy 2.1 reads plain postgresql:// as psycopg 3, 2.0 as psycopg2: whichever is installed works
    ("postgresql://u:pw@h/d", ("psycopg",), "postgresql+psycopg2://u:pw@h/d"),
    ("postgresql://u:pw@h/d", ("psycopg2",), "postgresql+psycopg://u:pw@h/d"),
    ("postgres://u:pw@h:5433/d", ("psycopg",), "postgresql+psycopg2://u:pw@h:5433/d"),  # Heroku-style DATABASE_URL
    ("postgresql+psycopg2://u:pw@h/d", (), "postgresql+psycopg2://u:pw@h/d"),
    ("mysql://u:pw@h/d", ("MySQLdb",), "mysql+pymysql://u:pw@h/d"),  # pymysql, not mysqlclient
    ("mariadb://u@h/d", ("MySQLdb",), "mariadb+pymysql://u@h/d"),
    ("sqlite:///x.db", (), "sqlite:///x.db"),
])
def test_a_database_url_connects_with_the_driver_that_is_installed(monkeypatch, url, hidden, expected):
    monkeypatch.delenv(stg.PASSWORD_ENV, raising=False)
    hide(monkeypatch, *hidden)
    su = stg.parse_url(url)
    assert su.url == expected
    assert "pw" not in su.shown.split("@")[0].split(":")[-1] or "***" in su.shown


def test_no_driver_installed_names_the_packages_and_url_forms(monkeypatch):
    hide(monkeypatch, "psycopg", "psycopg2", "pg8000")
    with pytest.raises(GankitError) as e:
        stg.parse_url(f"postgresql://sweep:{PASSWORD}@h/d")
    assert str(e.value) == ("--storage postgresql://sweep:***@h/d: no postgresql driver is installed: `pip install "
                            "psycopg2-binary` (postgresql+psycopg2://) or `pip install 'psycopg[binary]'` "
                            "(postgresql+psycopg://)")
    hide(monkeypatch, "pymysql")
    with pytest.raises(GankitError, match=r"mysql\+pymysql driver is not installed \(`pip install pymysql`\)"):
        stg.parse_url("mysql+pymysql://u@h/d")


def test_the_password_can_come_from_the_environment_and_is_never_shown(monkeypatch):
    monkeypatch.setenv(stg.PASSWORD_ENV, PASSWORD)
    su = stg.parse_url("postgresql+psycopg2://sweep@db.cluster/optuna")
    assert su.url == f"postgresql+psycopg2://sweep:{PASSWORD}@db.cluster/optuna"
    assert su.shown == "postgresql+psycopg2://sweep:***@db.cluster/optuna"
    assert su.redact(f"failed for {PASSWORD} and s3cret%2Dpw") == "failed for *** and s3cret%2Dpw"
    args, hidden = stg.command_form(["sweep", "r.toml", "--storage", f"postgresql://sweep:{PASSWORD}@h/d?x=1",
                                     f"--storage=mysql://a:{PASSWORD}@h/d"])
    assert hidden and args == ["sweep", "r.toml", "--storage", "postgresql://sweep@h/d?x=1",
                               "--storage=mysql://a@h/d"]


def test_an_unreachable_server_says_so_and_no_line_shows_the_password(tmp_path, monkeypatch):
    (tmp_path / "t.toml").write_text(TINY_RECIPE.format(out_dir="run") + '\n[[metric]]\nname = "swd"\n')
    monkeypatch.chdir(tmp_path)
    for url in (f"postgresql://sweep:{PASSWORD}@{CLOSED}/optuna", f"mysql://sweep:{PASSWORD}@{CLOSED}/optuna"):
        result = CliRunner().invoke(cli, ["sweep", "t.toml", "--param", "loss.name=[hinge,wgan]", "--storage", url,
                                          "--dry-run"])
        assert result.exit_code == 2, result.output
        assert PASSWORD not in result.output
        assert "the database server does not answer" in result.output and "is it running" in result.output
        assert ":***@127.0.0.1:9/optuna" in result.output


def test_an_unexpected_error_line_masks_a_password_seen(capsys):
    from gan_kit import user_errors

    stg.parse_url(f"postgresql://sweep:{PASSWORD}@h/d")

    @user_errors
    def command():
        raise GankitError(f"something said postgresql://sweep:{PASSWORD}@h/d")

    with pytest.raises(SystemExit):
        command()
    err = capsys.readouterr().err
    assert PASSWORD not in err and "something said postgresql://sweep:***@h/d" in err


def test_a_creation_race_is_retried_and_other_errors_are_not():
    calls = []

    def racing():
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError('(sqlite3.IntegrityError) UNIQUE constraint failed: alembic_version.version_num')
        return "opened"

    assert stg.with_retries(racing, base_s=0.001) == "opened" and len(calls) == 3
    calls.clear()

    def refused():
        calls.append(1)
        raise RuntimeError("connection refused")

    with pytest.raises(RuntimeError):
        stg.with_retries(refused, base_s=0.001)
    assert len(calls) == 1


# ------------------------------------------------------------ a real PostgreSQL server --


def _server_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres:
    """A throwaway PostgreSQL cluster: initdb on a temporary folder, trust for the superuser and
    a password login for ``sweep`` on a free loopback port, the unix socket in the folder.
    PostgreSQL refuses to run as root: as root, the server runs as the ``postgres`` user (else
    ``nobody``)."""

    def __init__(self, bindir: Path):
        self.bin = bindir
        self.dir = Path(tempfile.mkdtemp(prefix="gankit-pg-"))  # not under pytest's root-only tmp folders
        self.port = _free_port()
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            user = next((u for u in ("postgres", "nobody") if _has_user(u)), None)
            assert user is not None, "no user to run the PostgreSQL server as"
            os.chmod(self.dir, 0o755)
            shutil.chown(self.dir, user)
            self.prefix = ["runuser", "-u", user, "--"]
        self.data = self.dir / "data"
        self.databases = 0

    def _run(self, *cmd: str) -> None:
        out = subprocess.run([*self.prefix, *cmd], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr

    def start(self) -> None:
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                  "--no-sync")
        hba = self.data / "pg_hba.conf"
        hba.write_text("local all all trust\nhost all sweep 127.0.0.1/32 scram-sha-256\n"
                       "host all all 127.0.0.1/32 trust\n")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "server.log"), "-w", "-o",
                  f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
                  f"-c max_connections=200", "start")
        self.admin(f"CREATE ROLE sweep LOGIN PASSWORD '{PASSWORD}' CREATEDB")

    def admin(self, sql: str) -> None:
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres")
        conn.autocommit = True
        try:
            conn.cursor().execute(sql)
        finally:
            conn.close()

    def new_database(self) -> str:
        """A fresh empty database owned by ``sweep``; its URL with the password in it."""
        self.databases += 1
        name = f"optuna{self.databases}"
        self.admin(f"CREATE DATABASE {name} OWNER sweep")
        return f"postgresql://sweep:{PASSWORD}@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        subprocess.run([*self.prefix, str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w",
                        "stop"], capture_output=True, timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


@pytest.fixture(scope="module")
def postgres():
    bindir = _server_bin()
    if bindir is None:
        if os.environ.get("GANKIT_REQUIRE_POSTGRES") == "1":
            pytest.fail("GANKIT_REQUIRE_POSTGRES=1 but no PostgreSQL server binaries (initdb) are installed")
        pytest.skip("no PostgreSQL server binaries (initdb); .ci/run installs Debian's postgresql package")
    server = Postgres(bindir)
    try:
        server.start()
        yield server
    finally:
        server.stop()


ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def const_recipe(tmp_path: Path) -> Path:
    (tmp_path / "constmetric.py").write_text(CONST_METRIC)
    path = tmp_path / "t.toml"
    path.write_text('plugins = ["constmetric.py"]\n' + TINY_RECIPE.format(out_dir="run")
                    + '\n[[metric]]\nname = "const"\nevery_kimg = 0.1\n')
    return path


def sweep_cmd(recipe: Path, folder: Path, url: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "gan_kit", "sweep", str(recipe), "--out", str(folder), "--study", "s",
            "--storage", url, "--set", "run.threads=1", *args]


def pg_states(url: str) -> list[tuple[str, str]]:
    store = optuna.storages.RDBStorage(stg.parse_url(url).url)
    study = optuna.load_study(study_name="s", storage=store)
    return sorted((t.user_attrs.get("gankit:name"), t.state.name) for t in study.trials)


@pytest.mark.parametrize("workers", [2, 4])
def test_workers_started_at_once_on_a_new_database_each_run_each_trial_once(tmp_path, postgres, workers):
    url = postgres.new_database()
    recipe = const_recipe(tmp_path)
    cmd = sweep_cmd(recipe, tmp_path / "study", url, "--param", "metric.0.value=[1, 2, 3]", "--budget-kimg", "0.1")
    procs = [subprocess.Popen(cmd, cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(workers)]
    outs = [p.communicate(timeout=400)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * workers, outs  # every worker joined the study
    started = [line for out in outs for line in out.splitlines() if ": started (" in line]
    assert len(started) == 3, outs  # each trial once
    states = [s for s in pg_states(url) if s[1] != "FAIL"]  # a grid queued twice in the race: copies FAIL
    assert states == [("c000-s0", "COMPLETE"), ("c001-s0", "COMPLETE"), ("c002-s0", "COMPLETE")]
    assert all(PASSWORD not in out for out in outs)
    assert all("postgresql+psycopg" in out and ":***@127.0.0.1" in out for out in outs)  # the start line, masked


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_a_worker_killed_mid_trial_loses_nothing_on_postgresql(tmp_path, postgres, signum):
    url = postgres.new_database()
    recipe = const_recipe(tmp_path)
    folder = tmp_path / "study"
    cmd = sweep_cmd(recipe, folder, url, "--param", "metric.0.value=[1, 2]", "--budget-kimg", "0.6",
                    "--set", "run.snapshot_ticks=1")
    first = subprocess.Popen(cmd, cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    trial = folder / "c000-s0"
    deadline = time.monotonic() + 240
    while not (trial / "checkpoints" / "latest.pt").is_file() and time.monotonic() < deadline:
        time.sleep(0.05)
    first.send_signal(signum)
    out1 = first.communicate(timeout=120)[0]
    assert first.returncode == (-signal.SIGKILL if signum == signal.SIGKILL else 143), out1
    if signum == signal.SIGTERM:  # the continue line names the command without the password
        assert "continue the study with `gankit sweep" in out1 and f"(with the database password in " \
            f"{stg.PASSWORD_ENV})" in out1 and PASSWORD not in out1
        assert "--storage postgresql://sweep@127.0.0.1:" in out1
    assert not tr.run_finished(trial)
    second = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=400)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "c000-s0: resuming from kimg" in second.stdout, second.stdout
    assert PASSWORD not in second.stdout + second.stderr
    names = [s for s in pg_states(url) if s[1] == "COMPLETE"]
    assert names == [("c000-s0", "COMPLETE"), ("c001-s0", "COMPLETE")]
    rows = [json.loads(x) for x in (trial / "metrics.jsonl").read_text().splitlines()]
    assert [r["Progress/tick"] for r in rows] == list(range(len(rows)))  # continued, nothing lost or twice
    for name in ("c000-s0", "c001-s0"):
        assert PASSWORD not in (folder / name / "sweep.json").read_text()
        assert PASSWORD not in (folder / name / "sweep.log").read_text()


def test_a_refused_login_says_so_without_the_password(tmp_path, postgres, monkeypatch):
    url = postgres.new_database().replace(PASSWORD, "wrong-pw")
    with pytest.raises(GankitError) as e:
        from gankit_sweep.study import open_storage

        open_storage(url, tmp_path)
    assert "the server refused the login" in str(e.value) and "wrong-pw" not in str(e.value)
    monkeypatch.setenv(stg.PASSWORD_ENV, PASSWORD)  # the password from the environment: it opens
    from gankit_sweep.study import open_storage

    store, where = open_storage(url.replace(":wrong-pw", ""), tmp_path)
    assert store is not None and where.endswith(f"sweep:***@127.0.0.1:{postgres.port}/optuna{postgres.databases}")
