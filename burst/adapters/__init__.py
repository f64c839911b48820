"""Optional adapters between burst and training frameworks (``burst-train[frameworks]``).

Each is a thin layer over burst's checkpoint store and the program contract
(``burst.program.contract``), imported on its own so a missing framework costs nothing:

* ``burst.adapters.hf``: a Hugging Face ``TrainerCallback`` (save now and stop on a notice;
  resume from ``BURST_RESUME_FROM``);
* ``burst.adapters.lightning``: the same for Lightning;
* ``burst.adapters.dcp_storage``: a torch DCP ``StorageWriter``/``StorageReader`` on burst's
  store (content-addressed chunks, manifest-last commit, no local copy).

What they share (is there a notice, where to save and resume from, how training ends on a
notice) is ``burst.adapters.notice``. See docs/your-training.md.
"""
