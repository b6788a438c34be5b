"""Takes far longer to import than any bound (a hung network mount, a huge JIT)."""
import time

time.sleep(60)
