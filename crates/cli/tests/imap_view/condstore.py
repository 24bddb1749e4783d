"""Probes CONDSTORE (RFC 7162) of `mailvault serve --imap` with Python's imaplib; prints
what it saw as one JSON object for crates/cli/tests/imap_view.rs to check.

Usage: condstore.py PORT PASSWORD_FILE ACCOUNT
"""
import imaplib
import json
import re
import sys

port, pwfile, account = int(sys.argv[1]), sys.argv[2], sys.argv[3]
token = open(pwfile).read().strip()
out = {}


def text(data):
    return " ".join(d.decode("latin-1") for d in data if isinstance(d, bytes))


def answer(typ, data):
    return typ + " " + text(data)


c = imaplib.IMAP4("127.0.0.1", port)
out["capability"] = list(c.capabilities)
c.login('"%s*admin"' % account, token)
typ, data = c.enable("CONDSTORE")
out["enable"] = answer(typ, data)
out["enabled"] = text(c.response("ENABLED")[1])

# The snapshots' INBOXes, oldest first, with the HIGHESTMODSEQ STATUS gives.
typ, data = c.list('""', '"Snapshots/*/INBOX"')
names = [re.search(r'"/" "?(.*?)"?$', d.decode()).group(1) for d in data]
out["snapshots"] = []
for name in names:
    typ, data = c.status('"%s"' % name, "(HIGHESTMODSEQ MESSAGES)")
    out["snapshots"].append([name, answer(typ, data)])
# Oldest first: the second backup added a message to INBOX (two snapshots in one minute
# are named by their ids after the minute, which do not sort by time).
out["snapshots"].sort(key=lambda s: int(re.search(r"MESSAGES (\d+)", s[1]).group(1)))
snaps = [s[0] for s in out["snapshots"]]
typ, data = c.status("INBOX", "(HIGHESTMODSEQ)")
out["status_inbox"] = answer(typ, data)

# SELECT with the CONDSTORE parameter, and one with QRESYNC (not offered).
typ, data = c._simple_command("SELECT", "INBOX", "(CONDSTORE)")
out["select_condstore"] = answer(typ, data)
out["highestmodseq"] = text(c.response("HIGHESTMODSEQ")[1])
try:
    typ, data = c._simple_command("EXAMINE", "INBOX", "(QRESYNC (1 2))")
    out["select_qresync"] = answer(typ, data)
except imaplib.IMAP4.error as e:
    out["select_qresync"] = "error " + str(e)
c.select("INBOX", readonly=True)
h = int(out["highestmodseq"])
typ, data = c.fetch("1:*", "(UID MODSEQ)")
out["fetch_modseq"] = [d.decode() for d in data]
typ, data = c.uid("FETCH", "1:*", "(FLAGS) (CHANGEDSINCE %d)" % (h - 1))
out["changedsince_below"] = [d.decode() for d in data if d]
typ, data = c.uid("FETCH", "1:*", "(FLAGS) (CHANGEDSINCE %d)" % h)
out["changedsince_highest"] = [d.decode() for d in data if d]
typ, data = c.search(None, "MODSEQ", str(h))
out["search_highest"] = answer(typ, data)
typ, data = c.search(None, "MODSEQ", str(h + 1))
out["search_above"] = answer(typ, data)
typ, data = c.uid("SEARCH", "NOT", "MODSEQ", str(h))
out["search_not"] = answer(typ, data)
# An older snapshot's INBOX: its own, lower mod-sequence.
c.select('"%s"' % snaps[0], readonly=True)
out["old_highestmodseq"] = text(c.response("HIGHESTMODSEQ")[1])
typ, data = c.fetch("1", "(MODSEQ)")
out["old_fetch"] = text(data)
c.logout()
print(json.dumps(out))
