"""Loaded by scripts/bench-real.sh through PYTHONPATH: llama.cpp's weight repacking (its
extra CPU buffer types) crashes in this sandbox, so every model loads with it off, as in
scripts/gen_real_model_logits.py. The plain CPU kernels are the ones timed."""

try:
    import llama_cpp.llama_cpp as C

    _default = C.llama_model_default_params

    def _no_repack():
        p = _default()
        p.use_extra_bufts = False
        return p

    C.llama_model_default_params = _no_repack
except ImportError:
    pass
