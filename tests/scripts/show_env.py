"""Prints what python gives a script: __name__, argv, sys.path[0], __file__, __spec__; an
argparse parser so that `--help` and `--trace` after SCRIPT are the script's own."""
import argparse
import sys

print("name", __name__)
print("argv", sys.argv)
print("path0", sys.path[0])
print("file", __file__)
print("spec", getattr(__spec__, "name", None))
print("package", __package__)
if "--parse" in sys.argv:
    parser = argparse.ArgumentParser(description="a script with its own options")
    parser.add_argument("rest", nargs="*")
    parser.add_argument("--parse", action="store_true")
    parser.add_argument("--trace", default=None, help="the script's own --trace")
    parser.add_argument("--thresholds", default=None)
    parser.add_argument("-m", dest="m", default=None)
    args = parser.parse_args()
    print("parsed", vars(args))
