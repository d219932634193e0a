"""A SavedModel read as data: its variables, their names, its assets; nothing in it runs.

A SavedModel is a program: `tf.saved_model.load` runs its resource initializers and restore
functions before anyone looks at a variable. Every SavedModel a user hands in is read here
instead: `saved_model.pb` is parsed as a proto (its `SavedObjectGraph` names the objects),
the `variables/` checkpoint gives the tensors (`tf.train.load_checkpoint` reads them, runs no
graph), matched to the objects through the checkpoint's own object graph (a proto too), and
assets are files under `assets/`. Only SavedModels bert_tf wrote itself are ever run, where
it serves or checks them (see the compatibility guide, "Reading untrusted models").

>>> sm = SavedModelData("bert_en_uncased_L-2_H-128_A-2/2")         # doctest: +SKIP
>>> [name for name, _ in sm.variables_of(sm.node(["variables"]))]  # doctest: +SKIP
"""
import functools
import json
import re

import tensorflow as tf

from bert_tf import BertError
from bert_tf.convert.source import join, real_inside, safe_relative

MAX_PB_BYTES = 1 << 31  # protobuf's own limit: a larger saved_model.pb is no SavedModel
_OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
_READ_ERRORS = (tf.errors.OpError, ValueError, IndexError, RuntimeError, TypeError)


def _gist(e):
    text = str(e).strip()
    return (text.splitlines()[0][:160] if text else type(e).__name__)


class SavedModelData:
    """One SavedModel directory, read as data.

    Args:
        export_dir: the SavedModel folder (holding saved_model.pb and variables/).

    Raises:
        BertError (one line): no saved_model.pb, a truncated or foreign saved_model.pb, no
            object graph (a TF1 SavedModel), a missing or unreadable `variables/` checkpoint.
    """

    def __init__(self, export_dir):
        from tensorflow.core.protobuf import saved_model_pb2
        self.dir = export_dir.rstrip("/") or export_dir
        pb = join(self.dir, "saved_model.pb")
        if not tf.io.gfile.exists(pb):
            raise BertError(f"{self.dir}: not a SavedModel (no saved_model.pb)")
        if tf.io.gfile.stat(pb).length >= MAX_PB_BYTES:
            raise BertError(f"{pb}: over 2 GiB, not a SavedModel proto")
        proto = saved_model_pb2.SavedModel()
        try:
            with tf.io.gfile.GFile(pb, "rb") as f:
                proto.ParseFromString(f.read())
        except Exception as e:  # protobuf's DecodeError and friends
            raise BertError(f"{pb}: truncated or not a SavedModel ({_gist(e)})") from None
        if len(proto.meta_graphs) != 1 or not proto.meta_graphs[0].object_graph_def.nodes:
            raise BertError(f"{pb}: no TF2 object graph (a TF1 SavedModel, or truncated); "
                            f"bert_tf reads TF2 SavedModels")
        self.meta_graph = proto.meta_graphs[0]
        self.graph = self.meta_graph.object_graph_def
        n = len(self.graph.nodes)
        if any(not 0 <= c.node_id < n for node in self.graph.nodes for c in node.children):
            raise BertError(f"{pb}: its object graph refers to missing objects (truncated)")
        self.prefix = join(self.dir, "variables", "variables")
        if not tf.io.gfile.exists(self.prefix + ".index"):
            raise BertError(f"{self.dir}: no variables/ checkpoint (variables/variables.index "
                            f"is missing)")
        try:
            self.reader = tf.train.load_checkpoint(self.prefix)
        except _READ_ERRORS as e:
            raise BertError(f"{self.dir}: cannot read variables/ ({_gist(e)})") from None

    @functools.cached_property
    def _checkpoint_keys(self):
        """{SavedObjectGraph node id: checkpoint key of its value}: both object graphs walked
        from the root by child name, as a restore matches them."""
        from tensorflow.core.protobuf import trackable_object_graph_pb2
        ckpt = trackable_object_graph_pb2.TrackableObjectGraph()
        try:
            ckpt.ParseFromString(self.reader.get_tensor(_OBJECT_GRAPH_KEY))
        except Exception as e:  # a missing key, a truncated data file, a bad proto
            raise BertError(f"{self.dir}: variables/ has no readable object graph (truncated? "
                            f"{_gist(e)})") from None
        keys, queue, seen = {}, [(0, 0)], {0}
        n = len(ckpt.nodes)
        while queue:
            saved, ck = queue.pop()
            if not 0 <= ck < n:
                raise BertError(f"{self.dir}: the object graph of variables/ refers to missing "
                                f"objects (truncated)")
            for attr in ckpt.nodes[ck].attributes:
                if attr.name == "VARIABLE_VALUE":
                    keys[saved] = attr.checkpoint_key
            theirs = {c.local_name: c.node_id for c in ckpt.nodes[ck].children}
            for child in self.graph.nodes[saved].children:
                if child.node_id not in seen and child.local_name in theirs:
                    seen.add(child.node_id)
                    queue.append((child.node_id, theirs[child.local_name]))
        return keys

    def child(self, node_id, name):
        """The node id of a child, or None.

        Args:
            node_id: the parent's node id.
            name: the child's local name.
        """
        for c in self.graph.nodes[node_id].children:
            if c.local_name == name:
                return c.node_id
        return None

    def node(self, path, start=0):
        """The node id at a path of child names, or None.

        Args:
            path: list of child names.
            start: the node id the path starts from (the root).
        """
        node_id = start
        for name in path:
            node_id = self.child(node_id, name)
            if node_id is None:
                return None
        return node_id

    def kind(self, node_id):
        """"variable", "asset", "user_object", "function", ... of a node."""
        return self.graph.nodes[node_id].WhichOneof("kind")

    def items(self, node_id):
        """The node ids of a saved list's items, in list order (children "0", "1", ...)."""
        found = {int(c.local_name): c.node_id for c in self.graph.nodes[node_id].children
                 if re.fullmatch("[0-9]+", c.local_name)}
        return [found[i] for i in sorted(found)]

    def variable_name(self, node_id):
        """The variable's name as saved (`v.name` without ":0")."""
        return self.graph.nodes[node_id].variable.name

    def value(self, node_id):
        """The numpy value of a variable node, read from `variables/`."""
        if self.kind(node_id) != "variable":
            raise BertError(f"{self.dir}: object {node_id} is a {self.kind(node_id)}, not a "
                            f"variable")
        name = self.variable_name(node_id)
        key = self._checkpoint_keys.get(node_id)
        if key is None:
            raise BertError(f"{self.dir}: variables/ holds no value for {name} (truncated?)")
        try:
            value = self.reader.get_tensor(key)
        except _READ_ERRORS as e:
            raise BertError(f"{self.dir}: cannot read {name} from variables/ (truncated? "
                            f"{_gist(e)})") from None
        want = self.graph.nodes[node_id].variable.shape
        if not want.unknown_rank and all(d.size >= 0 for d in want.dim) \
                and tuple(value.shape) != tuple(d.size for d in want.dim):
            raise BertError(f"{self.dir}: {name} has shape {list(value.shape)} in variables/ "
                            f"but {[d.size for d in want.dim]} in saved_model.pb")
        return value

    def variables_of(self, list_node):
        """[(name, numpy value)] of the variables in a saved list (e.g. `variables`), in
        order; other items are left out."""
        return [(self.variable_name(i), self.value(i)) for i in self.items(list_node)
                if self.kind(i) == "variable"]

    def asset_path(self, node_id):
        """The file of an asset node: `assets/<its recorded name>` (never outside assets/)."""
        index = self.graph.nodes[node_id].asset.asset_file_def_index
        files = self.meta_graph.asset_file_def
        if self.kind(node_id) != "asset" or not 0 <= index < len(files):
            raise BertError(f"{self.dir}: asset {node_id} is not in saved_model.pb (truncated?)")
        path = safe_relative(join(self.dir, "assets"), files[index].filename, "asset")
        return real_inside(self.dir, path, "asset")

    def op_types(self):
        """Every op type in the SavedModel's graph and function library (read, not run)."""
        graph = self.meta_graph.graph_def
        return ({n.op for n in graph.node}
                | {n.op for f in graph.library.function for n in f.node_def})


    def functions_reachable(self, node_id):
        """Op types of the functions a saved function node (e.g. `tokenize`, or a module's
        `__call__`) can run: its concrete functions and every function they name (calls,
        branches), transitively; ops only other functions hold are left out."""
        library = {f.signature.name: f for f in self.meta_graph.graph_def.library.function}
        call = self.child(node_id, "__call__")  # a module called as a function
        todo = []
        for n in (node_id,) if call is None else (node_id, call):
            node = self.graph.nodes[n]
            if self.kind(n) == "function":
                todo += node.function.concrete_functions
            elif self.kind(n) == "bare_concrete_function":
                todo.append(node.bare_concrete_function.concrete_function_name)
        seen, ops = set(), set()
        while todo:
            name = todo.pop()
            if name in seen or name not in library:
                continue
            seen.add(name)
            for n in library[name].node_def:
                ops.add(n.op)
                for attr in n.attr.values():
                    todo += [attr.func.name] if attr.func.name else []
                    todo += [f.name for f in attr.list.func]
        return ops

    def keras_layer_configs(self):
        """The `config` dicts of the Keras layers a tf_keras SavedModel records in
        `keras_metadata.pb` (TF >= 2.5 keeps layer configs there, not in saved_model.pb), read
        as protobuf wire data; [] when there is none. A malformed file: BertError."""
        path = join(self.dir, "keras_metadata.pb")
        if not tf.io.gfile.exists(path):
            return []
        if tf.io.gfile.stat(path).length >= MAX_PB_BYTES:
            raise BertError(f"{path}: over 2 GiB, not Keras metadata")
        with tf.io.gfile.GFile(path, "rb") as f:
            data = f.read()
        configs = []
        try:
            # SavedMetadata: 1 = repeated SavedObject; SavedObject: 5 = metadata (JSON string)
            for field, node in _fields(data):
                if field != 1 or not isinstance(node, bytes):
                    continue
                for sub, value in _fields(node):
                    if sub != 5 or not isinstance(value, bytes):
                        continue
                    try:
                        meta = json.loads(value.decode("utf-8"))
                    except ValueError:  # one unreadable layer: not every layer matters
                        continue
                    if isinstance(meta, dict) and isinstance(meta.get("config"), dict):
                        configs.append(dict(meta["config"], class_name=meta.get("class_name")))
        except ValueError as e:
            raise BertError(f"{path}: truncated or not Keras metadata ({e})") from None
        return configs


def _varint(data, i):
    value = shift = 0
    while True:
        if i >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        b = data[i]
        value |= (b & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if not b & 0x80:
            return value, i


def _fields(data):
    """(field number, value) of a protobuf message's top-level fields, in wire order: bytes
    for length-delimited fields, int for varints and fixed-width ones; ValueError when the
    bytes are no protobuf message."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            if i + width > len(data):
                raise ValueError("truncated fixed-width field")
            value, i = int.from_bytes(data[i:i + width], "little"), i + width
        elif wire == 2:
            size, i = _varint(data, i)
            if i + size > len(data):
                raise ValueError("truncated length-delimited field")
            value, i = data[i:i + size], i + size
        else:
            raise ValueError(f"wire type {wire}")
        yield field, value
