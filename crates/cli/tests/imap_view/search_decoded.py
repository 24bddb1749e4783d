"""SEARCH on decoded text, judged against Dovecot: the same messages APPENDed to a real
Dovecot's INBOX (in the order mailvault's INBOX has them), then every query asked of
both servers with Python's imaplib. Prints {query: [mailvault's answer, Dovecot's]} as
JSON for crates/cli/tests/imap_view.rs.

Usage: search_decoded.py OUR_PORT PASSWORD_FILE ACCOUNT DOVECOT_PORT DOVECOT_PASSWORD MSG...
"""
import imaplib
import json
import sys

port, pwfile, account = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dport, dpass, files = int(sys.argv[4]), sys.argv[5], sys.argv[6:]
token = open(pwfile).read().strip()

ours = imaplib.IMAP4("127.0.0.1", port)
ours.login('"%s*admin"' % account, token)
ours.select("INBOX", readonly=True)
dove = imaplib.IMAP4("127.0.0.1", dport)
dove.login(account, dpass)
dove.select("INBOX")
for f in files:
    dove.append("INBOX", None, None, open(f, "rb").read())
dove.select("INBOX", readonly=True)

# (key, value): ASCII values as atoms or quoted strings, others as UTF-8 literals.
QUERIES = [
    ("SUBJECT", "treasure"),
    ("SUBJECT", "TREASURE MAP"),
    ("SUBJECT", "SGlkZGVu"),
    ("SUBJECT", "Grü"),
    ("SUBJECT", "GRÜ"),
    ("FROM", "jörg"),
    ("FROM", "joerg@example.org"),
    ("TO", "alice"),
    ("BODY", "pineapple"),
    ("BODY", "PINEAPPLE"),
    ("BODY", "strawberry"),
    ("BODY", "straw="),
    ("BODY", "dGhlIHNl"),
    ("BODY", "treasure"),
    ("BODY", "Überraschung"),
    ("TEXT", "pineapple"),
    ("TEXT", "treasure"),
    ("HEADER", "X-Note café"),
]


def ask(c, key, value):
    if key == "HEADER":
        name, value = value.split(" ", 1)
        key = "HEADER " + name
    data = value.encode("utf-8")
    if all(b < 0x80 for b in data):
        typ, res = c.search(None, key, '"%s"' % value)
    else:
        c.literal = data
        typ, res = c.search("UTF-8", key)
    return typ + " " + res[0].decode()


out = {}
for key, value in QUERIES:
    out["%s %s" % (key, value)] = [ask(ours, key, value), ask(dove, key, value)]
ours.logout()
dove.logout()
print(json.dumps(out))
