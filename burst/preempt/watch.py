"""Start the watchers a train step needs and stop them when it ends.

Signals are always watched. Metadata watchers run when ``BURST_PREEMPT_WATCHERS`` names them
(comma-separated: ``aws``, ``gcp``, ``azure``; empty or ``none`` for none): the pipeline sets
it on the train pod from the provisioned candidate's provider. On one machine nothing is set,
since there is no metadata service to ask.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from burst.errors import BadInputError
from burst.preempt.metadata import WATCHERS, MetadataWatcher
from burst.preempt.notice import NoticeBoard
from burst.preempt.signals import install_signal_watcher

log = logging.getLogger(__name__)

WATCHERS_ENV = "BURST_PREEMPT_WATCHERS"


def watcher_names(raw: str | None = None) -> list[str]:
    from burst.settings import current

    text = current().preempt_watchers if raw is None else raw
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    if names == ["none"]:
        return []
    for n in names:
        if n not in WATCHERS:
            raise BadInputError(
                f"{WATCHERS_ENV}: unknown watcher {n!r} (known: {', '.join(WATCHERS)}, none)"
            )
    return list(dict.fromkeys(names))


@dataclass
class Watchers:
    board: NoticeBoard
    threads: list[MetadataWatcher] = field(default_factory=list)
    restore_signals: Callable[[], None] | None = None

    @property
    def names(self) -> list[str]:
        return ["signals", *(t.source for t in self.threads)]

    def stop(self) -> None:
        for t in self.threads:
            t.stop()
        if self.restore_signals is not None:
            self.restore_signals()
            self.restore_signals = None


def start_watchers(
    board: NoticeBoard | None = None,
    names: list[str] | None = None,
    extra: Sequence[Callable[[NoticeBoard], MetadataWatcher | None]] = (),
) -> Watchers:
    """The signal watcher and the notice sources ``names`` (the settings' by default), and
    the sources of layers above this one, each started by ``extra`` (None: not here), such
    as the Kueue eviction watcher (burst.admission.kueue_watch)."""
    board = board or NoticeBoard()
    chosen = watcher_names() if names is None else names
    w = Watchers(board, restore_signals=install_signal_watcher(board))
    try:
        for name in chosen:
            t = WATCHERS[name](board)
            t.start()
            w.threads.append(t)
        for start in extra:
            started = start(board)
            if started is not None:
                w.threads.append(started)
    except BaseException:  # (a bad setting): nothing left behind, no handler, no thread
        w.stop()
        raise
    log.info("preemption watchers: %s", ", ".join(w.names))
    return w
