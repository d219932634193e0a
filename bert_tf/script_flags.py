"""Flags several top-level scripts share. No TensorFlow import: parsing flags stays fast."""


def define_tpu_flags():
    """The original's TPU flags (same names/defaults)."""
    from absl import flags
    flags.DEFINE_bool("use_tpu", False, "Whether to use TPU (same as --strategy=tpu).")
    flags.DEFINE_string("tpu_name", None, "The Cloud TPU to use.")
    flags.DEFINE_string("tpu_zone", None, "GCE zone where the Cloud TPU is located in.")
    flags.DEFINE_string("gcp_project", None, "Project name for the Cloud TPU-enabled project.")
    flags.DEFINE_string("master", None, "TPU address (used when --tpu_name is not given).")
    flags.DEFINE_integer("num_tpu_cores", 8, "Only used with --use_tpu: number of TPU cores "
                         "expected (the strategy reports the real number).")
