"""The store's tables (SQLAlchemy 2.x typed ORM).

Every table is prefixed ``archsearch_`` so that the store can share a database with Optuna's
own tables (``studies``, ``trials``, ``alembic_version``, ... without a prefix option); our
Alembic version table is ``archsearch_alembic_version`` for the same reason. Changing this file
needs a migration in ``migrations/versions``: a test compares the two.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

PREFIX = "archsearch_"
VERSION_TABLE = f"{PREFIX}alembic_version"

JSONType = JSON().with_variant(JSONB(), "postgresql")

# interrupted: the search was stopped (Ctrl-C, SIGTERM, a store outage) while it ran; resumable.
# duplicate: the same configuration as an earlier trial of the study, not trained again.
TRIAL_STATUSES = ("running", "completed", "pruned", "failed", "diverged", "infeasible", "interrupted", "duplicate")
# running: a driver runs it now; completed: it ended with completed trials; failed: it ended without
# any (every trial failed, or nothing was feasible); interrupted: its driver stopped before the end.
STUDY_STATUSES = ("running", "completed", "failed", "interrupted")


class Base(DeclarativeBase):
    pass


class Study(Base):
    __tablename__ = f"{PREFIX}studies"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSONType)
    objectives: Mapped[list[Any]] = mapped_column(JSONType)  # [{"name": "top1", "direction": "max"}, ...]
    status: Mapped[str] = mapped_column(String(16), default="running")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    archsearch_version: Mapped[str] = mapped_column(String(32))
    git_commit: Mapped[str | None] = mapped_column(String(64), nullable=True)
    hardware: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)  # since schema 0002
    driver: Mapped[str | None] = mapped_column(String(255), nullable=True)  # "HOST PID START KERNEL", since 0003
    status_message: Mapped[str | None] = mapped_column(Text, nullable=True)  # since schema 0003
    # The entry of the results dir this study's Ray experiment was created under (its name then, or
    # the next free one): renames leave it, delete/purge/resume act on it. Since schema 0007.
    experiment: Mapped[str | None] = mapped_column(String(255), nullable=True)
    # The results dir as an absolute path (never the reader's working directory) and the experiment
    # directory's identity ("DEVICE:INODE") when the study created it: delete/purge/rename/resume act
    # on this path, a purge only on that directory. Since schema 0009 (None: an older study).
    results_root: Mapped[str | None] = mapped_column(Text, nullable=True)
    results_identity: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # The running driver's lease: a random token every write of that driver is conditional on, and its
    # last heartbeat on the database's clock (liveness is judged by this beat's age). Since schema 0010.
    lease: Mapped[str | None] = mapped_column(String(64), nullable=True)
    lease_beat: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class Trial(Base):
    __tablename__ = f"{PREFIX}trials"
    __table_args__ = (
        UniqueConstraint("study_id", "number", name=f"{PREFIX}trials_study_number"),
        Index(f"{PREFIX}trials_study_status", "study_id", "status"),  # since schema 0002
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey(f"{PREFIX}studies.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    config: Mapped[dict[str, Any]] = mapped_column(JSONType)
    final: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)  # final + best metrics
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    seed: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    optuna_number: Mapped[int | None] = mapped_column(Integer, nullable=True)
    host: Mapped[str | None] = mapped_column(String(255), nullable=True)
    device: Mapped[str | None] = mapped_column(String(255), nullable=True)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    diverged_at_step: Mapped[int | None] = mapped_column(Integer, nullable=True)  # since schema 0002
    # {"sampled": {name: value}, "fixed": {name: value}}: the spec's parameters as this trial took
    # them (null for trials of older versions); since schema 0006
    parameters: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)


class Measurement(Base):
    """Cost of a trial's model: one row per trial."""

    __tablename__ = f"{PREFIX}measurements"

    trial_id: Mapped[int] = mapped_column(ForeignKey(f"{PREFIX}trials.id", ondelete="CASCADE"), primary_key=True)
    params: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    flops: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    flops_source: Mapped[str | None] = mapped_column(String(32), nullable=True)
    throughput: Mapped[float | None] = mapped_column(Float, nullable=True)
    throughput_min: Mapped[float | None] = mapped_column(Float, nullable=True)
    throughput_max: Mapped[float | None] = mapped_column(Float, nullable=True)
    latency_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    peak_memory_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    batch_size: Mapped[int | None] = mapped_column(Integer, nullable=True)
    image_size: Mapped[int | None] = mapped_column(Integer, nullable=True)
    dtype: Mapped[str | None] = mapped_column(String(16), nullable=True)
    device: Mapped[str | None] = mapped_column(String(255), nullable=True)
    torch_version: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # Measured beside other work (since schema 0011; None before): a packed trial's shared GPU, and what other
    # processes did on its CPUs while the throughput was timed (trials.measurement.machine_load).
    throughput_shared: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    load_others_cores: Mapped[float | None] = mapped_column(Float, nullable=True)
    load_cores: Mapped[int | None] = mapped_column(Integer, nullable=True)
    load_threads: Mapped[int | None] = mapped_column(Integer, nullable=True)


class VerifiedMeasurement(Base):
    """A front member's throughput and latency measured again, alone on one device (``archsearch
    verify``), in rounds interleaved with the other members; never overwrites the in-trial
    measurement. One row per verification run (since schema 0005)."""

    __tablename__ = f"{PREFIX}verified"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey(f"{PREFIX}trials.id", ondelete="CASCADE"), index=True)
    measured_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    throughput: Mapped[float | None] = mapped_column(Float, nullable=True)  # images/s, median over rounds
    throughput_min: Mapped[float | None] = mapped_column(Float, nullable=True)
    throughput_max: Mapped[float | None] = mapped_column(Float, nullable=True)
    latency_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    latency_ms_min: Mapped[float | None] = mapped_column(Float, nullable=True)
    latency_ms_max: Mapped[float | None] = mapped_column(Float, nullable=True)
    rounds: Mapped[int] = mapped_column(Integer)
    batch_size: Mapped[int | None] = mapped_column(Integer, nullable=True)
    image_size: Mapped[int | None] = mapped_column(Integer, nullable=True)
    dtype: Mapped[str | None] = mapped_column(String(16), nullable=True)
    device: Mapped[str | None] = mapped_column(String(255), nullable=True)
    host: Mapped[str | None] = mapped_column(String(255), nullable=True)


class EpochRecord(Base):
    """One point of a learning curve; unique per (trial, epoch): rewriting an epoch updates it."""

    __tablename__ = f"{PREFIX}epochs"
    __table_args__ = (UniqueConstraint("trial_id", "epoch", name=f"{PREFIX}epochs_trial_epoch"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey(f"{PREFIX}trials.id", ondelete="CASCADE"))
    epoch: Mapped[int] = mapped_column(Integer)
    step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    train_loss: Mapped[float | None] = mapped_column(Float, nullable=True)
    eval_loss: Mapped[float | None] = mapped_column(Float, nullable=True)
    top1: Mapped[float | None] = mapped_column(Float, nullable=True)
    top5: Mapped[float | None] = mapped_column(Float, nullable=True)
    lr: Mapped[float | None] = mapped_column(Float, nullable=True)
    images_per_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    epoch_time: Mapped[float | None] = mapped_column(Float, nullable=True)
    wall_time: Mapped[float | None] = mapped_column(Float, nullable=True)  # seconds since the trial started
    data_wait_fraction: Mapped[float | None] = mapped_column(Float, nullable=True)
    train_eval_loss: Mapped[float | None] = mapped_column(Float, nullable=True)  # eval mode, since schema 0004


class TestPrediction(Base):
    """A completed trial's per-image test predictions (datasets with a test split): the predicted
    class and the label of every test image, in the split's order, each as base64 text of one- or
    two-byte indices (``trials.training.predictions``). One row per trial, written with its final record;
    read through ``rows.test_predictions``. Since schema 0008."""

    __test__ = False  # not a pytest class, whatever its name
    __tablename__ = f"{PREFIX}test_predictions"

    trial_id: Mapped[int] = mapped_column(ForeignKey(f"{PREFIX}trials.id", ondelete="CASCADE"), primary_key=True)
    classes: Mapped[int] = mapped_column(Integer)
    images: Mapped[int] = mapped_column(Integer)
    labels: Mapped[str] = mapped_column(Text)
    predictions: Mapped[str] = mapped_column(Text)


MEASUREMENT_FIELDS = tuple(c.name for c in Measurement.__table__.columns if c.name != "trial_id")
NUMERIC_MEASUREMENT_FIELDS = tuple(
    c.name for c in Measurement.__table__.columns if c.name != "trial_id" and c.type.python_type in (int, float)
)
# Whole-number columns of a trial, its cost and its epochs (ids and keys aside): a read frame turns one
# into floats where a value is missing (pandas), and the CSV and JSON writers turn it back.
INTEGER_FIELDS = tuple(
    dict.fromkeys(
        c.name
        for table in (Trial.__table__, Measurement.__table__, EpochRecord.__table__)
        for c in table.columns
        if c.type.python_type is int and c.name not in ("id", "trial_id", "study_id")
    )
)
# Whole-number final metrics (trials.runner.final_metrics): the epochs and optimiser steps a trial ran.
INTEGER_METRICS = ("epochs", "steps")
EPOCH_FIELDS = tuple(c.name for c in EpochRecord.__table__.columns if c.name not in ("id", "trial_id"))
