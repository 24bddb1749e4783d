#!/usr/bin/env python3
"""Shares and rights over IMAP (RFC 4314), for crates/cli/tests/judge_acl.rs, and
mailbox METADATA (RFC 5464), for judge_cyrus.rs.

share:    as OWNER, creates FOLDER and gives each USER=RIGHTS of --grant on it (SETACL).
rights:   as ACCOUNT, prints JSON: every folder LIST "" "*" shows (the shared namespace
          included), with MYRIGHTS of each, and GETACL of those where the user may see it.
metadata: as ACCOUNT, sets each ENTRY=VALUE of --set on FOLDER (SETMETADATA), then prints
          JSON: its METADATA response to GETMETADATA (DEPTH infinity) (/private /shared).
quota:    as ACCOUNT, prints JSON: the QUOTA responses to GETQUOTAROOT INBOX (limits).
Everything with Python's imaplib: an independent client.
"""
import argparse
import imaplib
import json
import shlex

# The IMAP judge's helpers (the same directory is on the path).
from imap_judge import check, parse_names, quote


def connect(args, account):
    m = imaplib.IMAP4("127.0.0.1", args.port, timeout=60)
    check("LOGIN", *m.login(account, args.password))
    return m


def share(args):
    m = connect(args, args.account)
    check("CREATE", *m.create(quote(args.folder)))
    for g in args.grant:
        who, rights = g.split("=", 1)
        check(f"SETACL {who}", *m.setacl(quote(args.folder), who, rights))
    m.logout()


def rights(args):
    m = connect(args, args.account)
    out = {}
    for name in sorted(n for _, n in parse_names(check("LIST", *m.list('""', "*")))):
        entry = {}
        typ, data = m.myrights(quote(name))
        entry["myrights"] = data[0].decode().rsplit(" ", 1)[1] if typ == "OK" else typ
        typ, data = m.getacl(quote(name))
        entry["acl"] = data[0].decode().split(" ", 1)[1] if typ == "OK" else typ
        out[name] = entry
    m.logout()
    print(json.dumps(out, sort_keys=True))


def metadata(args):
    # imaplib knows neither command: declared here, sent as they are.
    imaplib.Commands.setdefault("GETMETADATA", ("AUTH", "SELECTED"))
    imaplib.Commands.setdefault("SETMETADATA", ("AUTH", "SELECTED"))
    m = connect(args, args.account)
    for s in args.set:
        entry, value = s.split("=", 1)
        typ, dat = m._simple_command("SETMETADATA", quote(args.folder), f"({entry} {quote(value)})")
        check(f"SETMETADATA {entry}", typ, dat)
    typ, dat = m._simple_command(
        "GETMETADATA", "(DEPTH infinity)", quote(args.folder), "(/private /shared)"
    )
    check("GETMETADATA", typ, dat)
    _, dat = m._untagged_response(typ, dat, "METADATA")
    out = {}
    for d in dat:
        if isinstance(d, bytes):
            text = d.decode()
            body = text[text.index("(") + 1 : text.rindex(")")]
            toks = shlex.split(body)
            for k, v in zip(toks[::2], toks[1::2]):
                if v != "NIL":
                    out[k] = v
    m.logout()
    print(json.dumps(out, sort_keys=True))


def quota(args):
    m = connect(args, args.account)
    typ, dat = m.getquotaroot("INBOX")
    check("GETQUOTAROOT", typ, dat)
    m.logout()
    # [[QUOTAROOT lines], [QUOTA lines]]: the QUOTA lines, root and (resource usage limit).
    print(json.dumps(sorted(d.decode() for d in dat[1] if isinstance(d, bytes))))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("action", choices=["share", "rights", "metadata", "quota"])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--account", required=True)
    p.add_argument("--password", required=True)
    p.add_argument("--folder")
    p.add_argument("--grant", action="append", default=[])
    p.add_argument("--set", action="append", default=[])
    args = p.parse_args()
    actions = {"share": share, "rights": rights, "metadata": metadata, "quota": quota}
    actions[args.action](args)


if __name__ == "__main__":
    main()
