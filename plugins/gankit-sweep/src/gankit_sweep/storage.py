"""A sweep's Optuna storage: the URL forms ``--storage`` takes, the database driver each needs,
the password kept out of every line gankit prints, and opening the storage when many workers
start at once on a new database.

URL forms (``gankit sweep --storage``, or the ``GANKIT_STORAGE`` environment variable):

- a journal file path (``runs/study.journal``; the default is ``<study folder>/study.journal``);
- ``sqlite:///FILE.db``;
- ``postgresql://USER@HOST[:PORT]/DB``: the driver SQLAlchemy prefers for ``postgresql://`` when
  it is installed (psycopg 3 in SQLAlchemy 2.1, psycopg2 in 2.0), else whichever of psycopg2
  (``pip install psycopg2-binary``), psycopg 3 (``pip install 'psycopg[binary]'``) or pg8000 is
  installed; ``postgresql+psycopg2://``, ``postgresql+psycopg://`` name one. ``postgres://``
  (what Heroku-style ``DATABASE_URL`` values use) is read as ``postgresql://``;
- ``mysql://USER@HOST/DB`` (``mariadb://``): mysqlclient, else PyMySQL (``pip install pymysql``),
  else mysql-connector-python; ``mysql+pymysql://`` names one;
- ``redis://...``: a journal in Redis.

The password: in the URL (``USER:PASSWORD@HOST``), or - better, since command lines end up in
shell histories and scheduler logs - in ``GANKIT_STORAGE_PASSWORD`` with a URL that has none
(libpq's ``PGPASSWORD`` and ``~/.pgpass`` also work for the PostgreSQL drivers built on it). It
is used to connect and never shown: every URL gankit prints has it as ``***``, and the command a
sweep prints for continuing it leaves it out (``StorageURL.command_form``).

Many workers on a new database (a SLURM array's first start) all create Optuna's tables, its
alembic version row and the study at once; unserialised, some die with unique-key errors.
``serialised`` makes them take turns: a PostgreSQL advisory lock or a MySQL named lock held on
the server, a file lock beside a SQLite file, the study folder's lock for a journal; and the few
errors such a race produces are retried with a back-off (``with_retries``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import re
import time
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import attrs

from gan_kit import GankitError, keep_secret

__all__ = ["StorageURL", "parse_url", "mask", "redact", "serialised", "with_retries", "is_race", "problem",
           "command_form", "PASSWORD_ENV", "URL_ENV", "STORAGE_FORMS", "DRIVERS"]

#: The environment variable holding the database password for a URL without one.
PASSWORD_ENV = "GANKIT_STORAGE_PASSWORD"
#: The environment variable ``--storage`` is read from when the option is not given.
URL_ENV = "GANKIT_STORAGE"

STORAGE_FORMS = ("--storage takes a journal file path such as runs/study.journal, sqlite:///FILE.db, or another "
                 "SQLAlchemy database URL Optuna can use: postgresql://USER@HOST/DB (psycopg2-binary or psycopg), "
                 "mysql://USER@HOST/DB (pymysql or mysqlclient), with the password in " + PASSWORD_ENV)

#: Backend -> its DBAPI drivers, in the order tried for a URL that names none: (SQLAlchemy's
#: driver name, the module it imports, the pip package that installs it).
DRIVERS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "postgresql": (("psycopg2", "psycopg2", "psycopg2-binary"), ("psycopg", "psycopg", "'psycopg[binary]'"),
                   ("pg8000", "pg8000", "pg8000")),
    "mysql": (("mysqldb", "MySQLdb", "mysqlclient"), ("pymysql", "pymysql", "pymysql"),
              ("mysqlconnector", "mysql.connector", "mysql-connector-python")),
    "mariadb": (("mysqldb", "MySQLdb", "mysqlclient"), ("pymysql", "pymysql", "pymysql"),
                ("mariadbconnector", "mariadb", "mariadb")),
}
#: Schemes read as another one.
ALIASES = {"postgres": "postgresql"}


@attrs.frozen
class StorageURL:
    """A database URL as gankit uses it. ``url``: what connects (the driver resolved, the
    password filled in) - never print it; ``shown``: the same with the password as ``***``;
    ``given``: the form the user wrote, password masked."""

    url: str = attrs.field(repr=False)
    shown: str
    given: str
    backend: str
    password: str | None = attrs.field(default=None, repr=False)

    @property
    def secrets(self) -> list[str]:
        """The texts that must not appear in any printed line (the password, raw and URL-encoded)."""
        if not self.password:
            return []
        from urllib.parse import quote, quote_plus

        return sorted({self.password, quote(self.password, safe=""), quote_plus(self.password)}, key=len,
                      reverse=True)

    def redact(self, text: str) -> str:
        for s in self.secrets:
            text = text.replace(s, "***")
        return text


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _default_driver(backend: str) -> str | None:
    """The driver SQLAlchemy uses for ``<backend>://`` (it changes between SQLAlchemy versions)."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(f"{backend}://").get_dialect().driver
    except Exception:  # noqa: BLE001 - an unknown backend: SQLAlchemy says so when connecting
        return None


def _choose_driver(backend: str, driver: str | None, shown: str) -> str | None:
    """The driver to connect ``backend`` with: ``driver`` when the URL names it (checked to be
    installed), else SQLAlchemy's default when installed, else the first installed one."""
    known = DRIVERS.get(backend)
    if known is None:
        return driver
    if driver is not None:
        entry = next((d for d in known if d[0] == driver), None)
        if entry is not None and not _installed(entry[1]):
            raise GankitError(f"--storage {shown}: the {backend}+{driver} driver is not installed "
                              f"(`pip install {entry[2]}`)")
        return driver
    default = _default_driver(backend)
    order = sorted(known, key=lambda d: d[0] != default)
    for name, module, _ in order:
        if _installed(module):
            return name
    forms = " or ".join(f"`pip install {pkg}` ({backend}+{name}://)" for name, _, pkg in known[:2])
    raise GankitError(f"--storage {shown}: no {backend} driver is installed: {forms}")


def mask(url: str) -> str:
    """``url`` with its password as ``***`` (for a URL SQLAlchemy cannot parse: by pattern)."""
    try:
        from sqlalchemy.engine import make_url

        u = make_url(url)
        return u.render_as_string(hide_password=True) if u.password else url
    except Exception:  # noqa: BLE001 - not a URL SQLAlchemy reads
        return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


def parse_url(url: str, environ: dict[str, str] | None = None) -> StorageURL:
    """A ``--storage`` database URL resolved for connecting (see the module docstring).

    Raises ``GankitError`` (one line, password masked) for a URL SQLAlchemy cannot read or a
    driver that is not installed."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    environ = os.environ if environ is None else environ
    given = mask(url)
    scheme = url.split("://", 1)[0]
    backend, _, driver = scheme.partition("+")
    if backend.lower() in ALIASES:
        url = ALIASES[backend.lower()] + (f"+{driver}" if driver else "") + url[len(scheme):]
        backend = ALIASES[backend.lower()]
    try:
        u = make_url(url)
    except (ArgumentError, ValueError) as e:
        raise GankitError(f"--storage {given}: not a database URL SQLAlchemy can read ({str(e).splitlines()[0]}); "
                          f"{STORAGE_FORMS}") from None
    if u.password is None and environ.get(PASSWORD_ENV):
        u = u.set(password=environ[PASSWORD_ENV])
    if u.password:
        keep_secret(*StorageURL(url="", shown="", given="", backend="", password=u.password).secrets)
    shown = u.render_as_string(hide_password=True) if u.password else u.render_as_string()
    chosen = _choose_driver(u.get_backend_name(), u.get_driver_name() if "+" in scheme else None, shown)
    if chosen is not None and "+" not in u.drivername:
        u = u.set(drivername=f"{u.get_backend_name()}+{chosen}")
    shown = u.render_as_string(hide_password=True) if u.password else u.render_as_string()
    return StorageURL(url=u.render_as_string(hide_password=False), shown=shown, given=given,
                      backend=u.get_backend_name(), password=u.password)


def redact(text: str, url: str | None) -> str:
    """``text`` without the password of ``url`` (each occurrence, raw or URL-encoded, as ``***``)."""
    if not url or "://" not in url:
        return text
    try:
        return parse_url(url, environ={}).redact(text)
    except GankitError:
        return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", text)


def command_form(argv: list[str]) -> tuple[list[str], bool]:
    """``argv`` (a ``gankit sweep`` command line) as it may be printed: a ``--storage`` URL's
    password left out (the user gives it again in ``GANKIT_STORAGE_PASSWORD``) and any other
    occurrence of it masked; and whether a password was left out."""
    out, secrets = [], []
    for i, arg in enumerate(argv):
        value, prefix = arg, ""
        if arg.startswith("--storage="):
            prefix, value = "--storage=", arg[len("--storage="):]
        elif not (i > 0 and argv[i - 1] == "--storage"):
            out.append(arg)
            continue
        without = _without_password(value)
        if without != value:
            secrets += _secrets_of(value) or [value]
        out.append(prefix + without)
    for s in secrets:
        out = [a.replace(s, "***") for a in out]
    return out, bool(secrets)


def _secrets_of(url: str) -> list[str]:
    try:
        return parse_url(url, environ={}).secrets
    except GankitError:
        return []


def _without_password(url: str) -> str:
    try:
        from sqlalchemy.engine import make_url

        from sqlalchemy.engine import URL

        u = make_url(url)
        if not u.password:
            return url
        return URL.create(u.drivername, username=u.username, host=u.host, port=u.port, database=u.database,
                          query=u.query).render_as_string()
    except Exception:  # noqa: BLE001
        return re.sub(r"(://[^:/@]+):[^@]*@", r"\1@", url)


# ---------------------------------------------------------------- many workers at once --

#: How often an open that lost a creation race is tried again.
ATTEMPTS = 8

#: What a creation race looks like in the errors of SQLite, PostgreSQL and MySQL (and alembic).
_RACE = re.compile(r"unique constraint|uniqueviolation|duplicate key|duplicate entry|already exists|"
                   r"database is locked|deadlock|integrityerror|duplicatedstudyerror|"
                   r"could not serialize access|lock wait timeout", re.I)


def is_race(e: BaseException) -> bool:
    """Whether ``e`` is what two processes creating one storage or study at once run into."""
    text = f"{type(e).__name__}: {e}"
    cause = e.__cause__ or e.__context__
    return bool(_RACE.search(text)) or (cause is not None and cause is not e and bool(_RACE.search(
        f"{type(cause).__name__}: {cause}")))


T = TypeVar("T")


def with_retries(fn: Callable[[], T], attempts: int = ATTEMPTS, base_s: float = 0.2) -> T:
    """``fn()``, tried again (a growing, jittered pause between tries) while it fails with a
    creation race (``is_race``); other errors and the last try's are raised as they are."""
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as e:
            if attempt == attempts - 1 or not is_race(e):
                raise
            time.sleep(base_s * (1.5 ** attempt) * (0.5 + random.random()))
    raise AssertionError("unreachable")


#: The PostgreSQL advisory lock key (any 64-bit number; this one is "gankit" in ASCII).
PG_LOCK_KEY = 0x67616E6B6974
MYSQL_LOCK = "gankit-optuna-storage"
#: How long a worker waits for another one's creation before giving up.
LOCK_WAIT_S = 600


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def _server_lock(su: StorageURL) -> Iterator[None]:
    """A lock held on the database server by one connection: PostgreSQL's session advisory
    lock, MySQL's GET_LOCK; released when the block ends (or the connection drops)."""
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    engine = sqlalchemy.create_engine(su.url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            if su.backend == "postgresql":
                conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": PG_LOCK_KEY})
                conn.commit()
                try:
                    yield
                finally:
                    conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": PG_LOCK_KEY})
                    conn.commit()
            else:
                got = conn.execute(sqlalchemy.text("SELECT GET_LOCK(:n, :t)"),
                                   {"n": MYSQL_LOCK, "t": LOCK_WAIT_S}).scalar()
                if got != 1:
                    raise GankitError(f"--storage {su.shown}: another worker held the storage's creation lock "
                                      f"for {LOCK_WAIT_S} s; is one stuck?")
                try:
                    yield
                finally:
                    conn.execute(sqlalchemy.text("SELECT RELEASE_LOCK(:n)"), {"n": MYSQL_LOCK})
    finally:
        engine.dispose()


@contextlib.contextmanager
def serialised(url: str | None, folder: Path, journal: Path | None) -> Iterator[None]:
    """Workers opening one storage take turns inside this block (see the module docstring).
    ``journal``: the journal file when the storage is one."""
    if journal is not None:
        with _file_lock(journal.parent / f".{journal.name}.lock"):
            yield
        return
    su = parse_url(url)
    if su.backend == "sqlite":
        database = su.url.split(":///", 1)[1] if ":///" in su.url else ""
        if not database or database == ":memory:":
            yield
            return
        db = Path(database)
        with _file_lock(db.parent / f"{db.name}.gankit-lock"):
            yield
        return
    if su.backend in ("postgresql", "mysql", "mariadb"):
        stack = contextlib.ExitStack()
        try:
            stack.enter_context(_server_lock(su))
        except GankitError:
            raise
        except Exception as e:  # noqa: BLE001 - the server is not there, a refused login: one line naming why
            raise GankitError(problem(su, e)) from None
        with stack:
            yield
        return
    yield


def problem(su: StorageURL, e: BaseException, tries: int = 1) -> str:
    """One line for a storage that cannot be opened, naming the real cause: a driver missing, an
    unknown scheme, a server that does not answer, a refused login, a missing database, or a
    creation race still lost after ``tries`` tries. The password never appears in it."""
    first = (str(e).strip().splitlines() or [type(e).__name__])[0][:240]
    first = su.redact(first)
    low = first.lower()
    where = f"--storage {su.shown}"
    if type(e).__name__ == "NoSuchModuleError" or "can't load plugin" in low:
        return f"{where}: unknown storage URL scheme {su.given.split('://', 1)[0] + '://'!r}; {STORAGE_FORMS}"
    if isinstance(e, ImportError) or isinstance(e.__cause__, ImportError):
        return f"{where}: the database driver is not installed ({first})"
    if any(s in low for s in ("password authentication failed", "access denied", "authentication failed",
                              "no password supplied", "pg_hba.conf")):
        return (f"{where}: the server refused the login ({first}); check the user, and the password in "
                f"{PASSWORD_ENV} (or the URL)")
    if ("does not exist" in low and "database" in low) or "unknown database" in low:
        return f"{where}: the database does not exist ({first}); create it first (e.g. `createdb DB`)"
    if any(s in low for s in ("connection refused", "could not connect", "can't connect", "could not translate host",
                              "name or service not known", "timeout expired", "timed out", "no route to host",
                              "connection failed", "is the server running")):
        return (f"{where}: the database server does not answer ({first}); is it running, and reachable from this "
                f"machine at that host and port?")
    if is_race(e):
        return (f"{where}: other workers were creating the same storage at the same moment, and opening it still "
                f"failed after {tries} tries ({first}); start the workers again")
    return f"{where}: cannot open it: {first}"
