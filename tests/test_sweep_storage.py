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

from gan_kit.cli import cli
from gan_kit.errors import GankitError
from gan_kit.sweep import storage as stg
from gan_kit.sweep import trials as tr
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
                                     "--storage=mysql://a:%s@h/d" % PASSWORD])
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
    from gan_kit.cli.errors import print_error

    stg.parse_url(f"postgresql://sweep:{PASSWORD}@h/d")
    print_error(GankitError(f"something said postgresql://sweep:{PASSWORD}@h/d"))
    assert PASSWORD not in capsys.readouterr().err


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
