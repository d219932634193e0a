"""`python -m bert_tf.resources [guide]`: where the shipped guides are, or one guide's text."""
import sys

from bert_tf import BertError, resources


def main(argv):
    """Lists the guides, or prints one.

    Args:
        argv: [] or [guide name].
    """
    if len(argv) > 1:
        sys.exit("usage: python -m bert_tf.resources [" + "|".join(resources.GUIDES) + "]")
    if not argv:
        for name, (_, what, checkout) in resources.GUIDES.items():
            print(f"{name:14} {resources.doc_file(name)}\n{'':14} {what} "
                  f"(in a checkout: {checkout})")
        return
    try:
        path = resources.doc_file(argv[0])
    except BertError as e:
        sys.exit(f"error: {e}")
    with open(path, encoding="utf-8") as f:
        sys.stdout.write(f.read())


if __name__ == "__main__":
    main(sys.argv[1:])
