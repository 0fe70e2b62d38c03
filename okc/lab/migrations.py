"""The ledger's schema as numbered migrations; okc.lab.ledger applies those a database has not seen."""

from __future__ import annotations

# Append-only: each entry is one migration, applied in its own transaction, never edited.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE candidates (
            id INTEGER PRIMARY KEY,
            number INTEGER NOT NULL,
            name TEXT NOT NULL,
            sha256 TEXT NOT NULL,
            first_seen TEXT NOT NULL,
            UNIQUE (number, name, sha256)
        )""",
        """CREATE TABLE runs (
            id INTEGER PRIMARY KEY,
            job_id TEXT UNIQUE,
            candidate_number INTEGER NOT NULL,
            candidate_name TEXT NOT NULL,
            candidate_sha256 TEXT NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ('check', 'bench', 'official-check', 'official-scored')),
            status TEXT NOT NULL,
            passed INTEGER,
            target TEXT,
            gpu TEXT,
            score REAL,
            ci_lo REAL,
            ci_hi REAL,
            speedups TEXT,
            against TEXT,
            official_job TEXT,
            rank TEXT,
            note TEXT,
            result_path TEXT,
            created_at TEXT NOT NULL
        )""",
        "CREATE INDEX runs_by_candidate ON runs (candidate_number, kind)",
        """CREATE TRIGGER runs_append_only BEFORE UPDATE ON runs
           BEGIN SELECT RAISE(ABORT, 'ledger runs are append-only: record a correction as a new row'); END""",
        """CREATE TRIGGER candidates_append_only BEFORE UPDATE ON candidates
           BEGIN SELECT RAISE(ABORT, 'ledger candidates are append-only'); END""",
    ),
    (
        # Measured read floors (okc floor), one row per floor job, looked up by GPU.
        """CREATE TABLE floors (
            id INTEGER PRIMARY KEY,
            job_id TEXT NOT NULL UNIQUE,
            gpu_uuid TEXT,
            gpu_name TEXT NOT NULL,
            sizes TEXT NOT NULL,
            created_at TEXT NOT NULL
        )""",
        "CREATE INDEX floors_by_gpu ON floors (gpu_uuid, gpu_name)",
        """CREATE TRIGGER floors_append_only BEFORE UPDATE ON floors
           BEGIN SELECT RAISE(ABORT, 'ledger floors are append-only: measure again for a new row'); END""",
    ),
    (
        # What GPU time cost: each job's GPU seconds and dollars (okc.lab.costs), and each pod's
        # $/h as okc last saw it (Runpod's API, or cost_per_hour in pod.yaml).
        """CREATE TABLE pod_rates (
            id INTEGER PRIMARY KEY,
            pod TEXT NOT NULL,
            runpod_id TEXT,
            usd_per_hour REAL NOT NULL,
            gpus INTEGER NOT NULL,
            source TEXT NOT NULL,
            started_at TEXT,
            observed_at TEXT NOT NULL
        )""",
        "CREATE INDEX pod_rates_by_pod ON pod_rates (pod, id)",
        """CREATE TABLE job_costs (
            id INTEGER PRIMARY KEY,
            job_id TEXT NOT NULL UNIQUE,
            kind TEXT NOT NULL,
            target TEXT NOT NULL,
            candidate_number INTEGER,
            candidate_name TEXT,
            gpu_seconds REAL,
            usd_per_gpu_hour REAL,
            usd REAL,
            created_at TEXT NOT NULL
        )""",
        """CREATE TRIGGER pod_rates_append_only BEFORE UPDATE ON pod_rates
           BEGIN SELECT RAISE(ABORT, 'ledger pod rates are append-only'); END""",
        """CREATE TRIGGER job_costs_append_only BEFORE UPDATE ON job_costs
           BEGIN SELECT RAISE(ABORT, 'ledger job costs are append-only'); END""",
    ),
    (
        # Sweeps (okc sweep): one row per point, stage and shape ('' for a check), and each run's winners,
        # again with the candidate a run emitted (okc.lab.sweep_ledger).
        """CREATE TABLE sweep_rows (
            id INTEGER PRIMARY KEY, sweep TEXT NOT NULL, run_id TEXT NOT NULL, point TEXT NOT NULL,
            params TEXT NOT NULL, point_sha256 TEXT NOT NULL,
            stage TEXT NOT NULL CHECK (stage IN ('screen', 'check', 'measure')), shape TEXT NOT NULL,
            status TEXT NOT NULL, reason TEXT, time_us REAL, speedup REAL, speedup_lo REAL, speedup_hi REAL,
            pairs INTEGER, job_id TEXT, slot TEXT, created_at TEXT NOT NULL,
            UNIQUE (run_id, point, stage, shape)
        )""",
        "CREATE INDEX sweep_rows_by_sweep ON sweep_rows (sweep, run_id)",
        """CREATE TABLE sweep_winners (
            id INTEGER PRIMARY KEY, sweep TEXT NOT NULL, run_id TEXT NOT NULL, shape TEXT NOT NULL,
            point TEXT NOT NULL, params TEXT NOT NULL, point_sha256 TEXT NOT NULL,
            time_us REAL, speedup REAL, speedup_lo REAL, speedup_hi REAL, job_id TEXT,
            emitted_number INTEGER, emitted_name TEXT, emitted_sha256 TEXT NOT NULL DEFAULT '',
            created_at TEXT NOT NULL, UNIQUE (run_id, shape, emitted_sha256)
        )""",
        """CREATE TRIGGER sweep_rows_append_only BEFORE UPDATE ON sweep_rows
           BEGIN SELECT RAISE(ABORT, 'ledger sweep rows are append-only'); END""",
        """CREATE TRIGGER sweep_winners_append_only BEFORE UPDATE ON sweep_winners
           BEGIN SELECT RAISE(ABORT, 'ledger sweep winners are append-only'); END""",
    ),
    (
        # Official timing tables (okc record --table): per load or per shape, baseline and candidate
        # microseconds of one official job, as JSON rows; and indexes for status per source hash
        # and for finding an official job.
        """CREATE TABLE official_tables (
            id INTEGER PRIMARY KEY,
            official_job TEXT NOT NULL UNIQUE,
            candidate_number INTEGER NOT NULL,
            candidate_sha256 TEXT NOT NULL,
            rows TEXT NOT NULL,
            source TEXT,
            created_at TEXT NOT NULL
        )""",
        """CREATE TRIGGER official_tables_append_only BEFORE UPDATE ON official_tables
           BEGIN SELECT RAISE(ABORT, 'ledger official tables are append-only'); END""",
        # Covers okc.lab.status's one pass over every run: the index alone answers it.
        "CREATE INDEX runs_status ON runs (candidate_number, kind, candidate_sha256, score, against)",
        "CREATE INDEX runs_by_official_job ON runs (official_job)",
    ),
    (
        # The source a bench was measured against (its sha256): a bench is stale once the baseline
        # changes too, not only its candidate. The status index covers the new column as well.
        "ALTER TABLE runs ADD COLUMN against_sha256 TEXT",
        "DROP INDEX runs_status",
        "CREATE INDEX runs_status ON runs (candidate_number, kind, candidate_sha256, score, against, against_sha256)",
    ),
    (
        # Profiles (okc.lab.profiles): a row per job, its kernels as JSON; official ones typed in (okc.lab.official).
        """CREATE TABLE profiles (id INTEGER PRIMARY KEY, job_id TEXT NOT NULL UNIQUE, candidate_number INTEGER NOT NULL,
            candidate_name TEXT NOT NULL, candidate_sha256 TEXT NOT NULL, status TEXT NOT NULL, against_name TEXT,
            against_sha256 TEXT, target TEXT, gpu TEXT, device TEXT, note TEXT, summary TEXT NOT NULL,
            result_path TEXT, created_at TEXT NOT NULL)""",
        "CREATE INDEX profiles_by_source ON profiles (candidate_sha256, status)",
        """CREATE TABLE official_profiles (id INTEGER PRIMARY KEY, candidate_number INTEGER NOT NULL,
            candidate_name TEXT NOT NULL, candidate_sha256 TEXT NOT NULL, official_job TEXT, rows TEXT NOT NULL,
            digest TEXT NOT NULL, source TEXT, created_at TEXT NOT NULL, UNIQUE (candidate_sha256, digest))""",
        *(f"CREATE TRIGGER {table}_append_only BEFORE UPDATE ON {table} BEGIN SELECT RAISE(ABORT, "
          f"'ledger {table.replace('_', ' ')} are append-only'); END" for table in ("profiles", "official_profiles")),
    ),
    (
        # What a check or bench covered when it was not the judge's whole run (okc.lab.records.scope_of): some of
        # the cases, or a bench protocol other than the default; NULL: all of it (every row before this column).
        # A scoped bench is never a candidate's best, nor a scoped pass its check: the status index covers the
        # column, and passed, so okc.lab.status's pass stays on the index alone.
        "ALTER TABLE runs ADD COLUMN scope TEXT",
        "DROP INDEX runs_status",
        "CREATE INDEX runs_status ON runs (candidate_number, kind, candidate_sha256, score, against, against_sha256, scope, passed)",
    ),
    (
        # The clock a bench timed its calls on, as its result's protocol says ("graph": CUDA graph replays; "eager": one
        # eager call between CUDA events); NULL for other kinds, and for every bench before this column (read as
        # "graph", okc's only default then). A bench on a clock other than the lab's judge's is treated as a scoped one
        # (okc.lab.status); the status index covers the column too, so okc.lab.status's pass stays on the index alone.
        "ALTER TABLE runs ADD COLUMN clock TEXT",
        "DROP INDEX runs_status",
        "CREATE INDEX runs_status ON runs (candidate_number, kind, candidate_sha256, score, against, against_sha256, scope, "
        "passed, clock)",
    ),
)
