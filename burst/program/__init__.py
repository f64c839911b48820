"""Your own training program (``training.command``): any command, with burst's guarantees.

A mode of the train loop (``burst.train.loop``): the same attempt, store, writer, notices and
endings, with ``supervise`` in place of the loop's steps. ``contract`` (the environment a
program gets), ``process`` and ``tree`` (starting it, its process tree, notices to the
processes that handle them), ``watcher``, ``formats`` and ``snapshot`` (the checkpoint
directory watched, each format's completion rule, committed through the one writer; the
program's own marker is ``burst.checkpoint.commit``), ``exits`` (the line that carries its
error, a worker killed), ``check`` (``burst validate``'s check of the command).
"""
