"""Packing's two passes over TFRecord files, as jobs of the streaming mode's workers.

Pass 1 (`LengthTask`, one per input file) reads every record, checks it and keeps only counts:
the length histogram and the most predictions seen per length. Pass 2 (`PackTask`, one per
output shard) reads its slice of the input again in windows of at most `window_size`
sequences, packs each window (`packing.pack_sequences`: SPFHP on the window's histogram) and
writes the shard under a temp name. Records are read and written without TensorFlow for local
paths: TFRecord framing here, tf.train.Example through protobuf with a descriptor of our own.
"""
import dataclasses
import hashlib
import os
import struct
import time

import numpy as np

from bert_tf import BertError
from bert_tf.pretraining_data import sequence_packing as packing
from bert_tf.fileio import is_local
from bert_tf.pretraining_data.documents import open_binary
from bert_tf.pretraining_data.guard import signals_held
from bert_tf.pretraining_data.writer import RecordFile, frame, masked_crc

_HEAD = struct.Struct("<QI")
REPORT_EVERY = 2000  # records between progress messages


# ---- TFRecord + tf.train.Example, no TensorFlow ----------------------------------------------

def iter_records(path, skip=0, digest=None):
    """Yields the records of a TFRecord file (after the first `skip`).

    Args:
        path: the TFRecord file.
        skip: how many records to pass over first.
        digest: a hashlib object that gets every byte read (with skip=0: the whole file).

    Raises:
        packing.InputError: not TFRecord framing (bad length checksum, cut short).
    """
    with open_binary(path) as f:
        index = 0
        while True:
            head = f.read(12)
            if digest is not None:
                digest.update(head)
            if not head:
                return
            if len(head) < 12:
                raise packing.InputError(f"record {index}: cut short (not a TFRecord file?): "
                                         "make the file again or leave it out of --input_file")
            length, crc = _HEAD.unpack(head)
            if masked_crc(head[:8]) != crc:
                raise packing.InputError("not a TFRecord file (bad record framing): leave it out "
                                         "of --input_file")
            if index < skip:
                f.seek(length + 4, 1)
            else:
                data, footer = f.read(length), f.read(4)
                if digest is not None:
                    digest.update(data + footer)
                if len(data) < length or len(footer) < 4:
                    raise packing.InputError(f"record {index}: cut short (the file is truncated): "
                                             "make it again or leave it out of --input_file")
                yield data
            index += 1


def _payload(data):
    """The packed values of a serialised Int64List/FloatList (field 1, length-delimited)."""
    if not data:
        return b""
    i, n, shift = 1, 0, 0
    while True:
        b = data[i]
        i += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return data[i:i + n]
        shift += 7


def _varints(payload):
    """Packed varints -> int64 array (vectorised)."""
    a = np.frombuffer(payload, np.uint8)
    if not a.size or a.max() < 0x80:
        return a.astype(np.int64)
    ends = np.flatnonzero(a < 0x80)
    starts = np.concatenate(([0], ends[:-1] + 1))
    shift = (np.arange(a.size) - np.repeat(starts, ends - starts + 1)) * 7
    values = (a & 0x7F).astype(np.uint64) << shift.astype(np.uint64)
    return np.add.reduceat(values, starts).view(np.int64)


_EXAMPLE = []  # the tf.train.Example message class, built on first use


def example_class():
    """tf.train.Example's wire format as a protobuf class of our own (protobuf's C parser,
    without importing TensorFlow, whose example_pb2 lives in the tensorflow package)."""
    if _EXAMPLE:
        return _EXAMPLE[0]
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    fdp = descriptor_pb2.FieldDescriptorProto
    f = descriptor_pb2.FileDescriptorProto(name="bert_tf/packing_example.proto",
                                           package="bert_tf_packing", syntax="proto3")

    def message(name, *fields, parent=None):
        m = (parent.nested_type if parent else f.message_type).add(name=name)
        for number, (field_name, kind, type_name, label) in enumerate(fields, 1):
            m.field.add(name=field_name, number=number, type=kind, label=label,
                        type_name=type_name or None)
        return m

    rep, opt = fdp.LABEL_REPEATED, fdp.LABEL_OPTIONAL
    message("BytesList", ("value", fdp.TYPE_BYTES, "", rep))
    message("FloatList", ("value", fdp.TYPE_FLOAT, "", rep))
    message("Int64List", ("value", fdp.TYPE_INT64, "", rep))
    feature = message("Feature", ("bytes_list", fdp.TYPE_MESSAGE, ".bert_tf_packing.BytesList", opt),
                      ("float_list", fdp.TYPE_MESSAGE, ".bert_tf_packing.FloatList", opt),
                      ("int64_list", fdp.TYPE_MESSAGE, ".bert_tf_packing.Int64List", opt))
    feature.oneof_decl.add(name="kind")
    for field in feature.field:
        field.oneof_index = 0
    features = message("Features", ("feature", fdp.TYPE_MESSAGE,
                                    ".bert_tf_packing.Features.FeatureEntry", rep))
    entry = message("FeatureEntry", ("key", fdp.TYPE_STRING, "", opt),
                    ("value", fdp.TYPE_MESSAGE, ".bert_tf_packing.Feature", opt), parent=features)
    entry.options.map_entry = True
    message("Example", ("features", fdp.TYPE_MESSAGE, ".bert_tf_packing.Features", opt))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("bert_tf_packing.Example"))
    _EXAMPLE.append(cls)
    return cls


def decode_example(data):
    """A serialized tf.train.Example -> {name: numpy array} (int64 or float32; bytes features
    are kept as None).

    Raises:
        packing.InputError: not a tf.train.Example.
    """
    from google.protobuf.message import DecodeError
    try:
        example = example_class().FromString(data)
    except DecodeError:
        raise packing.InputError("not a tf.train.Example record: give the pre-training "
                                 "TFRecords create_pretraining_data writes") from None
    out = {}
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        if kind == "int64_list":  # re-serialised packed: numpy decodes it (~10x list())
            out[name] = _varints(_payload(feature.int64_list.SerializeToString()))
        elif kind == "float_list":
            out[name] = np.frombuffer(_payload(feature.float_list.SerializeToString()),
                                      "<f4").astype(np.float32)
        else:
            out[name] = None
    return out


def read_sequence(data, max_seq_length):
    """A serialized unpacked record -> (packing.Sequence, padded length of its input_ids).

    Args:
        data: the serialized tf.train.Example.
        max_seq_length: S (a longer sequence is an InputError).
    """
    features = decode_example(data)
    packing.check_features(features)
    if any(features[n] is None for n in packing.schema.FEATURE_NAMES):
        raise packing.InputError("not a pre-training record (a feature holds bytes): give the "
                                 "records create_pretraining_data writes")
    return packing.to_sequence(features, max_seq_length), len(features["input_ids"])


def file_digest(path, on_bytes=None):
    """sha256 of a file's bytes (hex): what the resume fingerprint holds of each input, so an
    input rewritten to the same size is not taken for the one read before.

    Args:
        path: the file.
        on_bytes: called with the number of bytes of each block read (a progress bar).
    """
    digest = hashlib.sha256()
    try:
        with open_binary(path) as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
                if on_bytes is not None:
                    on_bytes(len(block))
    except Exception as e:  # noqa: BLE001  (gone or unreadable: one line)
        raise _unreadable(path, e) from None
    return digest.hexdigest()


RACY_NS = 2_000_000_000  # coarser than any file system's mtime (FAT: 2 s)


def file_stamp(path):
    """[size, mtime_ns] of a file (mtime 0 where the file system has none); a file that is
    gone or unreadable is a one-line BertError."""
    try:
        if is_local(path):
            st = os.stat(path)
            return [st.st_size, st.st_mtime_ns]
        import tensorflow as tf
        st = tf.io.gfile.stat(path)
        return [st.length, int(getattr(st, "mtime_nsec", 0) or 0)]
    except Exception as e:  # noqa: BLE001  (OSError, tf's OpError: one line either way)
        raise _unreadable(path, e) from None


def _unreadable(path, error):
    reason = getattr(error, "strerror", None) or getattr(error, "message", None) or \
        type(error).__name__
    return _where(path, None, f"cannot be read now ({str(reason).splitlines()[0]}): if it "
                              f"moved or changed while packing, leave the inputs alone and run "
                              f"again without --resume")


def stamp_proves(stamp, read_start_ns, path):
    """Whether an unchanged `stamp` proves unchanged content: a rewrite after a read that
    started at `read_start_ns` gets a later mtime, unless the file was last written within the
    mtime's granularity before that read (then only its sha256 tells; as git's "racy" files).
    Remote stores stamp each write (ms) and a read takes longer, so theirs prove it.

    Args:
        stamp: [size, mtime_ns] of the file (`file_stamp`).
        read_start_ns: when the read that the stamp vouches for started (ns since the epoch).
        path: the file (local paths are judged by their mtime's granularity).
    """
    if not stamp[1]:
        return False
    return not is_local(path) or stamp[1] <= read_start_ns - RACY_NS


CHANGED = ("changed since pass 1 read it: leave the inputs alone while packing, then run "
           "again without --resume")


def _where(path, index, error):
    return BertError(f"--input_file {path}: record {index}: {error}" if index is not None
                     else f"--input_file {path}: {error}")


# ---- jobs ------------------------------------------------------------------------------------

@dataclasses.dataclass
class PackConfig:
    """What a worker needs (picklable)."""
    max_seq_length: int
    max_sequences_per_pack: int
    num_predictions: int = 0  # P (pass 2)
    random_seed: int = 12345
    input_stamps: dict = None  # path -> [size, mtime_ns] at pass 1 (pass 2 checks them)


@dataclasses.dataclass
class LengthTask:
    """Pass 1: one input file."""
    index: int
    path: str
    size: int = 0


@dataclasses.dataclass
class PackTask:
    """Pass 2: one output shard from `pieces` [(path, skip, take)], packed in windows."""
    index: int
    pieces: list
    windows: list  # sequences per window, in order
    first_window: int  # global index of the first window (its shuffling seed)
    output: str = ""

    @property
    def size(self):
        """Sequences the shard packs (all its windows)."""
        return sum(self.windows)


def length_job(cfg):
    """`workers.run_tasks` make_job for pass 1: ("done", file, counts) per input file."""
    def job(task, report, done):
        s = cfg.max_seq_length
        histogram = np.zeros(s + 1, np.int64)
        most = np.zeros(s + 1, np.int64)  # most predictions seen per length
        count = padded = unreported = 0
        digest = hashlib.sha256()
        start_ns, stamp = time.time_ns(), file_stamp(task.path)  # before reading
        try:
            for index, data in enumerate(iter_records(task.path, digest=digest)):
                try:
                    seq, width = read_sequence(data, s)
                except packing.InputError as e:
                    raise _where(task.path, index, e) from None
                n = len(seq)
                histogram[n] += 1
                most[n] = max(most[n], seq.num_predictions)
                count += 1
                padded += width
                unreported += 1
                if unreported >= REPORT_EVERY:
                    report(("progress", task.index, 0, unreported, 0))
                    unreported = 0
        except packing.InputError as e:  # the framing
            raise _where(task.path, None, e) from None
        report(("progress", task.index, 0, unreported, 0))
        report(("done", task.index, {"records": count, "padded_tokens": padded,
                                     "sha256": digest.hexdigest(), "size": stamp[0],
                                     "stamp": stamp,
                                     "stamp_proves": stamp_proves(stamp, start_ns, task.path),
                                     "histogram": histogram.tolist(),
                                     "max_predictions": most.tolist()}, done()))
    return job


def _check_stamp(path, stamps):
    if not stamps or path not in stamps:
        return
    (size, mtime), (was_size, was_mtime) = file_stamp(path), stamps[path]
    if size != was_size:
        raise _where(path, None, f"now {size} bytes, {was_size} in pass 1: it {CHANGED}")
    if mtime != was_mtime:
        raise _where(path, None, f"modified (mtime) since pass 1: it {CHANGED}")


def _sequences(pieces, max_seq_length, stamps=None):
    for path, skip, take in pieces:
        if not take:
            continue
        _check_stamp(path, stamps)
        i = -1
        try:
            for i, data in enumerate(iter_records(path, skip)):
                try:
                    yield read_sequence(data, max_seq_length)[0]
                except packing.InputError as e:
                    raise _where(path, skip + i, e) from None
                if i + 1 == take:
                    break
        except packing.InputError as e:  # the framing
            raise _where(path, None, f"{e}: it {CHANGED}") from None
        if i + 1 < take:  # fewer records than pass 1 counted: never a bare StopIteration
            raise _where(path, None, f"has {skip + i + 1} records, pass 1 read {skip + take} "
                         f"or more: it {CHANGED}")


def write_packs(task, cfg, report, done=None):
    """Pass 2: make shard `task` into `task.output` (temp name, renamed when complete).

    Args:
        task: the PackTask.
        cfg: the PackConfig.
        report: sends a progress/done message tuple to the parent.
        done: () -> what the "done" message carries, or None to send none.

    Returns:
        the shard's counts (sequences, packs, tokens, predictions, ...).
    """
    s, n, p = cfg.max_seq_length, cfg.max_sequences_per_pack, cfg.num_predictions
    f = RecordFile(task.output)
    stats = {"sequences": 0, "packs": 0, "tokens": 0, "predictions": 0,
             "most_predictions_in_a_pack": 0}
    try:
        source = _sequences(task.pieces, s, cfg.input_stamps)
        for w, size in enumerate(task.windows):
            window = [next(source) for _ in range(size)]
            packs = packing.pack_sequences(window, s, n,
                                           packing.window_rng(cfg.random_seed,
                                                              task.first_window + w))
            for start in range(0, len(packs), REPORT_EVERY):
                block = packs[start:start + REPORT_EVERY]
                for pack in block:
                    m = sum(q.num_predictions for q in pack)
                    stats["most_predictions_in_a_pack"] = max(stats["most_predictions_in_a_pack"], m)
                    if m > p:  # never drop a prediction; pass 1 saw fewer
                        raise BertError(f"--input_file: a pack needs {m} masked-LM predictions, "
                                        f"more than the {p} pass 1 planned for: an input {CHANGED}")
                    stats["predictions"] += m
                    stats["tokens"] += sum(len(q) for q in pack)
                records = [packing.encode_row(packing.build_row(pack, s, p, n)) for pack in block]
                f.write_framed(frame(records), len(records))
                report(("progress", task.index, len(block),
                        sum(len(pack) for pack in block), 0))
            stats["sequences"] += size
            stats["packs"] += len(packs)
        for path, _, _ in task.pieces:  # not rewritten while this shard read it
            _check_stamp(path, cfg.input_stamps)
        with signals_held():
            f.commit()
            if done is not None:
                report(("done", task.index, stats, done()))
    except BaseException:
        f.abort()
        raise
    return stats


def pack_job(cfg):
    """`workers.run_tasks` make_job for pass 2."""
    return lambda task, report, done: write_packs(task, cfg, report, done)
