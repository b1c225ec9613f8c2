"""sys.exit with the value named by argv[1]: an int, 'none', or any other text."""
import sys

print("exiting", sys.argv[1:])
arg = sys.argv[1]
if arg == "none":
    sys.exit(None)
try:
    value = int(arg)
except ValueError:
    value = arg
sys.exit(value)
