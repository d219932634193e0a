"""Counters for the stats JSON written beside the output."""
import json

COUNTERS = (
    "documents",            # non-empty documents read (per pass, not multiplied by dupe_factor)
    "sentences",            # non-empty lines (segments) in those documents
    "instances",            # records written
    "tokens",               # real tokens in the records, [CLS]/[SEP] included
    "candidates",           # maskable tokens (real tokens minus [CLS]/[SEP])
    "masked",               # masked-LM positions
    "masked_as_mask",       # ... replaced by [MASK]
    "masked_kept",          # ... left unchanged (includes a random draw of the same token)
    "masked_random",        # ... replaced by another token
    "nsp_random_next",      # next_sentence_labels == 1
    "nsp_actual_next",      # next_sentence_labels == 0
    "nsp_forced_random_next",  # ... of the random-next ones: chunk of one sentence, no coin drawn
    "nsp_same_document",    # ... of the random-next ones: B drawn from A's own document (a
                            #     mislabelled pair; only a single-document corpus needs one)
    "truncated_instances",  # pairs that had to be truncated to fit max_seq_length
    "truncated_tokens",     # tokens removed by that truncation
)


class Stats:
    """The counters of `COUNTERS` as int attributes (0 unless given).

    Args:
        **values: initial counter values, by name.
    """

    def __init__(self, **values):
        for name in COUNTERS:
            setattr(self, name, int(values.get(name, 0)))

    def add_instance(self, num_tokens, masked_positions, original_tokens, output_tokens,
                     is_random_next, mask_token):
        """Count one instance; tokens may be strings or ids (same kind for both lists).

        Args:
            num_tokens: tokens of the instance, [CLS]/[SEP] included.
            masked_positions: its masked-LM positions.
            original_tokens, output_tokens: the tokens before and after masking.
            is_random_next: the NSP label.
            mask_token: [MASK] (string or id, as the tokens).
        """
        self.instances += 1
        self.tokens += num_tokens
        self.candidates += num_tokens - 3
        self.masked += len(masked_positions)
        for p in masked_positions:
            new = output_tokens[p]
            if new == mask_token:
                self.masked_as_mask += 1
            elif new == original_tokens[p]:
                self.masked_kept += 1
            else:
                self.masked_random += 1
        if is_random_next:
            self.nsp_random_next += 1
        else:
            self.nsp_actual_next += 1

    def merge(self, other):
        """Adds another Stats' counters into this one; returns self."""
        for name in COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        return self

    def to_dict(self):
        """Counter name -> value (picklable, JSON-able)."""
        return {name: getattr(self, name) for name in COUNTERS}

    @classmethod
    def from_dict(cls, data):
        """A Stats from `to_dict`'s output (unknown keys ignored)."""
        return cls(**{k: v for k, v in data.items() if k in COUNTERS})

    def summary(self, seconds):
        """The stats JSON's dict: the counters, timing and derived fractions."""
        d = self.to_dict()
        d["seconds"] = round(seconds, 3)
        d["instances_per_second"] = round(self.instances / seconds, 1) if seconds > 0 else None
        d["masked_fraction_of_candidates"] = _ratio(self.masked, self.candidates)
        d["nsp_random_next_fraction"] = _ratio(self.nsp_random_next, self.instances)
        # The NSP coin alone (the original forces random-next for one-sentence chunks).
        d["nsp_coin_random_next_fraction"] = _ratio(self.nsp_random_next - self.nsp_forced_random_next,
                                                    self.instances - self.nsp_forced_random_next)
        d["nsp_same_document_fraction"] = _ratio(self.nsp_same_document, self.nsp_random_next)
        d["truncated_fraction"] = _ratio(self.truncated_instances, self.instances)
        return d

    def summary_line(self, seconds, outputs):
        """The one-line report printed at the end.

        Args:
            seconds: the run's wall time.
            outputs: the number of files written.
        """
        return (f"wrote {self.instances} instances ({self.tokens} tokens, {self.masked} masked, "
                f"{_pct(self.nsp_random_next, self.instances)} random-next) from "
                f"{self.documents} documents to {outputs} file(s) in {seconds:.1f}s "
                f"({self.instances / max(seconds, 1e-9):.0f} instances/s)")


def _ratio(a, b):
    return round(a / b, 6) if b else None


def _pct(a, b):
    return f"{100.0 * a / b:.1f}%" if b else "n/a"


def dumps(data):
    """The stats JSON text (indented, keys in insertion order, trailing newline)."""
    return json.dumps(data, indent=2, sort_keys=False) + "\n"
