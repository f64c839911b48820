"""Tiered inference (docs/inference.md): a distilled model near users, the heavy model where
the GPUs are, and a router whose policy is code.

routing      the pure policy: request + tiers' state + residency -> an ordered plan, and the
             executor of a plan (each step's outcome -> the next step), every decision logged
residency    which regions may serve a request, from the legal preflight's rules (transfer
             kind "inference")
distill      a run's final checkpoint -> teacher, distilled student, int8 student, in the store
serve        the tiers and the router on loopback (`burst serve`), with the link emulator
triton_tier  one tier served by NVIDIA Triton (`burst serve --engine triton`)
triton_repo  a tier as a Triton model repository (what deploy/inference's services load)
faults       the faults a serving run can inject (`burst serve --fault`)
"""
