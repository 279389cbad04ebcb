"""``jetlog stream …`` and ``jetlog consumer …``: the JetStream API from the command line, in the
``nats`` CLI's words (ls, info, add, rm, purge, get, next), as readable tables or ``--json``.

Works against jetlog and against nats-server alike: every command is one or a few JetStream API
requests; ``--json`` prints the server's own reply bodies. Errors print one line with the
server's description and code and exit with status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from jetlog import adminview as view

API = "$JS.API."


class AdminError(Exception):
    """A failure to report in one line (exit status 1)."""


class Api:
    """JetStream API requests over one connection; replies as dicts, errors as AdminError."""

    def __init__(self, nc: Any, timeout: float) -> None:
        self.nc = nc
        self.timeout = timeout

    async def call(self, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One request; the reply body (AdminError for an ``error`` reply or no answer)."""
        import nats.errors

        data = msgspec.json.encode(body) if body is not None else b""
        try:
            msg = await self.nc.request(API + subject, data, timeout=self.timeout)
        except nats.errors.NoRespondersError:
            raise AdminError("no JetStream responder (is jetlog running beside this server?)") from None
        except (TimeoutError, nats.errors.TimeoutError):
            raise AdminError(f"no answer to {API}{subject} within {self.timeout:g}s") from None
        reply = msgspec.json.decode(msg.data)
        if not isinstance(reply, dict):
            raise AdminError(f"unexpected reply to {API}{subject}")
        err = reply.get("error")
        if err:
            raise AdminError(
                f"{err.get('description', 'error')} (code {err.get('code')}, err_code {err.get('err_code')})"
            )
        return reply

    async def paged(self, subject: str, key: str, body: dict[str, Any] | None = None) -> list[Any]:
        """Every page of a NAMES/LIST request."""
        out: list[Any] = []
        while True:
            reply = await self.call(subject, {**(body or {}), "offset": len(out)})
            items = reply.get(key) or []
            out.extend(items)
            if not items or len(out) >= int(reply.get("total", 0)):
                return out


# ---- stream commands -------------------------------------------------------------------------


async def stream_ls(api: Api, args: argparse.Namespace) -> None:
    infos = await api.paged("STREAM.LIST", "streams")
    if args.json:
        view.print_json(infos)
        return
    rows = []
    for i in sorted(infos, key=lambda x: x["config"]["name"]):
        c, s = i["config"], i["state"]
        rows.append(
            [
                c["name"],
                ", ".join(c.get("subjects") or []),
                f"{s['messages']:,}",
                view.human_bytes(s["bytes"]),
                str(c.get("num_replicas", 1)),
                view.cluster_text(i),
                str(s.get("consumer_count", 0)),
            ]
        )
    view.table(
        f"Streams ({len(rows)})",
        ["Name", "Subjects", "Messages", "Size", "Replicas", "Leader", "Consumers"],
        rows,
    )


async def stream_info(api: Api, args: argparse.Namespace) -> None:
    info = await api.call(f"STREAM.INFO.{args.stream}")
    info.pop("type", None)
    if args.json:
        view.print_json(info)
        return
    c, s = info["config"], info["state"]
    view.pairs(
        f"Stream {c['name']}",
        [
            ("Subjects", ", ".join(c.get("subjects") or []) or "-"),
            ("Storage", f"{c.get('storage')}, {c.get('num_replicas', 1)} replica(s)"),
            ("Retention", f"{c.get('retention')}, discard {c.get('discard')}"),
            ("Limits", view.limits_text(c)),
            ("Created", str(info.get("created"))),
            ("Messages", f"{s['messages']:,} ({view.human_bytes(s['bytes'])})"),
            ("Sequences", f"{s['first_seq']}..{s['last_seq']}"),
            ("Subjects held", str(s.get("num_subjects", 0))),
            ("Deleted", str(s.get("num_deleted", 0))),
            ("Consumers", str(s.get("consumer_count", 0))),
            ("Cluster", view.cluster_text(info)),
        ],
    )


async def stream_add(api: Api, args: argparse.Namespace) -> None:
    cfg: dict[str, Any] = {
        "name": args.stream,
        "subjects": [s.strip() for s in args.subjects.split(",") if s.strip()],
        "storage": args.storage,
        "retention": args.retention,
        "discard": args.discard,
        "num_replicas": args.replicas,
    }
    limits = {"max_msgs": args.max_msgs, "max_bytes": args.max_bytes, "max_age": args.max_age}
    cfg.update({k: v for k, v in limits.items() if v is not None})
    if args.allow_direct:
        cfg["allow_direct"] = True
    info = await api.call(f"STREAM.CREATE.{args.stream}", cfg)
    info.pop("type", None)
    if args.json:
        view.print_json(info)
        return
    print(f"created stream {args.stream}")
    await stream_info(api, args)


async def stream_rm(api: Api, args: argparse.Namespace) -> None:
    _confirm(args, f"delete stream {args.stream} and all its messages")
    await api.call(f"STREAM.DELETE.{args.stream}")
    _done(args, {"deleted": args.stream}, f"deleted stream {args.stream}")


async def stream_purge(api: Api, args: argparse.Namespace) -> None:
    _confirm(args, f"purge stream {args.stream}")
    body: dict[str, Any] = {}
    if args.subject:
        body["filter"] = args.subject
    if args.keep is not None:
        body["keep"] = args.keep
    if args.seq is not None:
        body["seq"] = args.seq
    reply = await api.call(f"STREAM.PURGE.{args.stream}", body or None)
    _done(
        args,
        {"purged": reply.get("purged", 0)},
        f"purged {reply.get('purged', 0):,} messages from {args.stream}",
    )


async def stream_get(api: Api, args: argparse.Namespace) -> None:
    body: dict[str, Any] = {"last_by_subj": args.last_for} if args.last_for else {"seq": args.seq}
    if not args.last_for and args.seq is None:
        raise AdminError("give a sequence or --last-for SUBJECT")
    reply = await api.call(f"STREAM.MSG.GET.{args.stream}", body)
    m = reply["message"]
    data = base64.b64decode(m.get("data") or "")
    hdrs = base64.b64decode(m.get("hdrs") or "") if m.get("hdrs") else b""
    if args.json:
        view.print_json(
            {**m, "data": data.decode("utf-8", "replace"), "hdrs": hdrs.decode("utf-8", "replace") or None}
        )
        return
    pairs = [("Sequence", str(m["seq"])), ("Subject", m["subject"]), ("Time", str(m.get("time")))]
    if hdrs:
        lines = hdrs.decode("utf-8", "replace").split("\r\n")[1:]
        pairs.append(("Headers", "; ".join(h for h in lines if h)))
    pairs.append(("Size", view.human_bytes(len(data))))
    view.pairs(f"{args.stream} #{m['seq']}", pairs)
    sys.stdout.write(data.decode("utf-8", "replace") + "\n")


# ---- consumer commands -----------------------------------------------------------------------


async def consumer_ls(api: Api, args: argparse.Namespace) -> None:
    infos = await api.paged(f"CONSUMER.LIST.{args.stream}", "consumers")
    if args.json:
        view.print_json(infos)
        return
    rows = []
    for i in sorted(infos, key=lambda x: x["name"]):
        c = i["config"]
        rows.append(
            [
                i["name"],
                "push" if c.get("deliver_subject") else "pull",
                c.get("filter_subject") or ", ".join(c.get("filter_subjects") or []) or ">",
                c.get("ack_policy", ""),
                f"{i.get('num_pending', 0):,}",
                f"{i.get('num_ack_pending', 0):,}",
                f"{i.get('num_redelivered', 0):,}",
                str(i.get("ack_floor", {}).get("stream_seq", 0)),
            ]
        )
    cols = ["Name", "Kind", "Filter", "Ack", "Pending", "Ack pending", "Redelivered", "Ack floor"]
    view.table(f"Consumers of {args.stream} ({len(rows)})", cols, rows)


async def consumer_info(api: Api, args: argparse.Namespace) -> None:
    info = await api.call(f"CONSUMER.INFO.{args.stream}.{args.consumer}")
    info.pop("type", None)
    if args.json:
        view.print_json(info)
        return
    c = info["config"]
    d, f = info.get("delivered", {}), info.get("ack_floor", {})
    view.pairs(
        f"Consumer {args.stream} > {info['name']}",
        [
            ("Kind", f"push to {c['deliver_subject']}" if c.get("deliver_subject") else "pull"),
            ("Filter", c.get("filter_subject") or ", ".join(c.get("filter_subjects") or []) or ">"),
            (
                "Deliver",
                f"{c.get('deliver_policy')}, ack {c.get('ack_policy')}, ack wait {view.human_duration(c.get('ack_wait', 0))}",
            ),
            ("Max deliver", str(c.get("max_deliver", -1))),
            ("Delivered", f"consumer seq {d.get('consumer_seq', 0)}, stream seq {d.get('stream_seq', 0)}"),
            ("Ack floor", f"consumer seq {f.get('consumer_seq', 0)}, stream seq {f.get('stream_seq', 0)}"),
            ("Pending", f"{info.get('num_pending', 0):,}"),
            ("Ack pending", f"{info.get('num_ack_pending', 0):,}"),
            ("Redelivered", f"{info.get('num_redelivered', 0):,}"),
            ("Waiting pulls", str(info.get("num_waiting", 0))),
        ],
    )


async def consumer_add(api: Api, args: argparse.Namespace) -> None:
    cfg: dict[str, Any] = {
        "durable_name": args.consumer,
        "deliver_policy": args.deliver,
        "ack_policy": args.ack,
        "max_deliver": args.max_deliver,
    }
    if args.ack_wait is not None:
        cfg["ack_wait"] = args.ack_wait
    if args.filter:
        subjects = [s.strip() for s in args.filter.split(",") if s.strip()]
        if len(subjects) == 1:
            cfg["filter_subject"] = subjects[0]
        else:
            cfg["filter_subjects"] = subjects
    if args.target:
        cfg["deliver_subject"] = args.target
    info = await api.call(
        f"CONSUMER.CREATE.{args.stream}.{args.consumer}", {"stream_name": args.stream, "config": cfg}
    )
    info.pop("type", None)
    if args.json:
        view.print_json(info)
        return
    print(f"created consumer {args.stream} > {args.consumer}")


async def consumer_rm(api: Api, args: argparse.Namespace) -> None:
    _confirm(args, f"delete consumer {args.stream} > {args.consumer}")
    await api.call(f"CONSUMER.DELETE.{args.stream}.{args.consumer}")
    _done(
        args,
        {"deleted": f"{args.stream}>{args.consumer}"},
        f"deleted consumer {args.stream} > {args.consumer}",
    )


async def consumer_next(api: Api, args: argparse.Namespace) -> None:
    """Pull ``--count`` messages from a pull consumer, print them, ack them (unless --no-ack)."""
    import nats.errors

    nc = api.nc
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    got: list[dict[str, Any]] = []
    try:
        body = {"batch": args.count, "expires": int(api.timeout * 1e9)}
        await nc.publish(
            f"{API}CONSUMER.MSG.NEXT.{args.stream}.{args.consumer}", msgspec.json.encode(body), reply=inbox
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + api.timeout + 1
        while len(got) < args.count:
            try:
                msg = await sub.next_msg(timeout=max(0.05, deadline - loop.time()))
            except (TimeoutError, nats.errors.TimeoutError):
                break
            status = (msg.headers or {}).get("Status") if msg.headers else None
            if status:
                if status in ("404", "408", "409"):
                    break
                continue
            meta = msg.reply.split(".") if msg.reply else []
            item = {
                "subject": msg.subject,
                "stream_seq": int(meta[-4]) if len(meta) >= 9 else None,
                "deliveries": int(meta[-5]) if len(meta) >= 9 else None,
                "data": msg.data.decode("utf-8", "replace"),
            }
            got.append(item)
            if not args.no_ack and msg.reply:
                await nc.request(msg.reply, b"", timeout=api.timeout)
    finally:
        await sub.unsubscribe()
    if args.json:
        view.print_json(got)
        return
    if not got:
        print(f"no messages for {args.stream} > {args.consumer}")
        return
    for m in got:
        acked = "" if args.no_ack else " (acked)"
        print(f"[#{m['stream_seq']} {m['subject']}, delivery {m['deliveries']}{acked}] {m['data']}")


# ---- status ----------------------------------------------------------------------------------


async def cluster_status(api: Api) -> dict[str, Any] | None:
    """The cluster's status (``$JETLOG.API.CLUSTER``), or None for a single node / nats-server."""
    import nats.errors

    try:
        msg = await api.nc.request("$JETLOG.API.CLUSTER", b"", timeout=api.timeout)
    except (TimeoutError, nats.errors.Error):
        return None
    try:
        body = msgspec.json.decode(msg.data)
    except msgspec.DecodeError:
        return None
    return body if isinstance(body, dict) else None


async def status(api: Api, args: argparse.Namespace) -> None:
    """``jetlog status``: the account, the cluster's members and Raft leader, every stream with
    its leader, in-sync replicas and lag."""
    account = await api.call("INFO")
    account.pop("type", None)
    cluster = await cluster_status(api)
    streams = await api.paged("STREAM.LIST", "streams")
    if args.json:
        view.print_json({"account": account, "cluster": cluster, "streams": streams})
        return
    view.console().print(
        f"streams: {account.get('streams', 0)}  consumers: {account.get('consumers', 0)}  "
        f"storage: {view.human_bytes(account.get('storage', 0))}  memory: {view.human_bytes(account.get('memory', 0))}"
    )
    roles = (cluster or {}).get("streams", {})
    if cluster is not None:
        rows = []
        for name, m in sorted(cluster.get("members", {}).items()):
            role = "Raft leader" if name == cluster.get("raft_leader") else "member"
            rows.append([name, role, "up" if m.get("alive") else "DOWN", str(m.get("leads", 0))])
        title = f"Cluster {cluster.get('cluster')} (Raft term {cluster.get('raft_term')})"
        view.table(title, ["Node", "Role", "State", "Leads"], rows)
    rows = []
    for i in sorted(streams, key=lambda x: x["config"]["name"]):
        c, st = i["config"], i["state"]
        r = roles.get(c["name"])
        leader, isr, lag = "-", "-", "-"
        if r is not None:
            leader = f"{r['leader'] or '-'} (epoch {r['epoch']})"
            isr = ", ".join(r["isr"])
            lags = r.get("lag", {})
            lag = (
                ", ".join(
                    f"{f} {lags.get(f, '?')}" + ("" if f in r["isr"] else " (out of sync)")
                    for f in r["replicas"]
                    if f != r["leader"]
                )
                or "-"
            )
        rows.append(
            [
                c["name"],
                f"{st['messages']:,}",
                view.human_bytes(st["bytes"]),
                f"{st['first_seq']}..{st['last_seq']}",
                leader,
                isr,
                lag,
            ]
        )
    view.table(
        f"Streams ({len(rows)})",
        ["Stream", "Messages", "Size", "Sequences", "Leader", "In sync", "Lag"],
        rows,
    )


# ---- plumbing --------------------------------------------------------------------------------


def _confirm(args: argparse.Namespace, what: str) -> None:
    if args.force:
        return
    if not sys.stdin.isatty():
        raise AdminError(f"refusing to {what} without --force (not a terminal)")
    answer = input(f"Really {what}? [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise AdminError("cancelled")


def _done(args: argparse.Namespace, obj: dict[str, Any], text: str) -> None:
    if args.json:
        view.print_json(obj)
    else:
        print(text)


async def connect(url: str, timeout: float) -> Any:
    """A nats-py connection that fails fast and quietly (one attempt, no reconnects, no
    traceback logging), with credentials as the node takes them: from the environment, never
    the command line. Raises OSError/TimeoutError/nats.errors.Error."""
    import nats

    async def quiet(_e: Exception) -> None:
        return None

    opts: dict[str, Any] = {
        "connect_timeout": timeout,
        "allow_reconnect": False,
        "max_reconnect_attempts": 1,
        "reconnect_time_wait": 0,
        "error_cb": quiet,
    }
    from jetlog.config import SECRET_ENV

    creds = {key: os.environ[var] for var, key in SECRET_ENV.items() if os.environ.get(var)}
    if "user" in creds:
        opts["user"], opts["password"] = creds["user"], creds.get("password", "")
    if "token" in creds:
        opts["token"] = creds["token"]
    if "creds_file" in creds:
        opts["user_credentials"] = creds["creds_file"]
    return await asyncio.wait_for(nats.connect(url, **opts), timeout + 0.5)


def why(e: BaseException) -> str:
    """One line for a connection or request failure."""
    text = str(e).strip()
    if isinstance(e, TimeoutError) or not text:
        return text or "timed out"
    return text.splitlines()[0]


def run(args: argparse.Namespace, fn: Callable[[Api, argparse.Namespace], Awaitable[None]]) -> int:
    """Connect, run one command, report failures in one line (exit status 1)."""

    async def main() -> int:
        import nats

        try:
            nc = await connect(args.nats_url, args.timeout)
        except (OSError, TimeoutError, nats.errors.Error) as e:
            print(f"jetlog: cannot connect to {args.nats_url}: {why(e)}", file=sys.stderr)
            return 1
        try:
            await fn(Api(nc, args.timeout), args)
        except AdminError as e:
            print(f"jetlog: {e}", file=sys.stderr)
            return 1
        finally:
            with contextlib.suppress(nats.errors.Error):
                await nc.close()
        return 0

    return asyncio.run(main())


def add_parsers(sub: Any) -> None:
    """Register ``stream`` and ``consumer`` with their subcommands."""

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--nats-url", default="nats://127.0.0.1:4222", help="server (default %(default)s)")
        sp.add_argument(
            "--timeout", type=float, default=5.0, help="seconds per request (default %(default)s)"
        )
        sp.add_argument("--json", action="store_true", help="print the server's JSON instead of a table")

    s = sub.add_parser("stream", help="list, inspect, create, delete, purge streams; read a message")
    ss = s.add_subparsers(dest="stream_cmd", required=True)
    p = ss.add_parser("ls", help="list streams")
    common(p)
    p.set_defaults(admin=stream_ls)
    p = ss.add_parser("info", help="a stream's configuration and state")
    p.add_argument("stream", help="stream name")
    common(p)
    p.set_defaults(admin=stream_info)
    p = ss.add_parser("add", help="create a stream")
    p.add_argument("stream", help="stream name")
    p.add_argument("--subjects", required=True, help="comma separated subjects")
    p.add_argument("--replicas", type=int, default=1, help="replicas (default %(default)s)")
    p.add_argument(
        "--storage", choices=["file", "memory"], default="file", help="storage (default %(default)s)"
    )
    p.add_argument(
        "--retention",
        choices=["limits", "interest", "workqueue"],
        default="limits",
        help="retention (default %(default)s)",
    )
    p.add_argument("--discard", choices=["old", "new"], default="old", help="when full (default %(default)s)")
    p.add_argument("--max-msgs", type=int, help="message limit")
    p.add_argument("--max-bytes", type=int, help="size limit in bytes")
    p.add_argument("--max-age", type=view.parse_duration, help="age limit (90s, 5m, 1h, 2d)")
    p.add_argument("--allow-direct", action="store_true", help="allow Direct Get (KV-style reads)")
    common(p)
    p.set_defaults(admin=stream_add)
    p = ss.add_parser("rm", help="delete a stream")
    p.add_argument("stream", help="stream name")
    p.add_argument("-f", "--force", action="store_true", help="do not ask")
    common(p)
    p.set_defaults(admin=stream_rm)
    p = ss.add_parser("purge", help="remove a stream's messages")
    p.add_argument("stream", help="stream name")
    p.add_argument("--subject", help="only messages on this subject")
    p.add_argument("--keep", type=int, help="keep the newest N")
    p.add_argument("--seq", type=int, help="remove below this sequence")
    p.add_argument("-f", "--force", action="store_true", help="do not ask")
    common(p)
    p.set_defaults(admin=stream_purge)
    p = ss.add_parser("get", help="read one message by sequence or the last on a subject")
    p.add_argument("stream", help="stream name")
    p.add_argument("seq", type=int, nargs="?", help="message sequence")
    p.add_argument("--last-for", metavar="SUBJECT", help="the last message on SUBJECT")
    common(p)
    p.set_defaults(admin=stream_get)

    c = sub.add_parser("consumer", help="list, inspect, create, delete consumers; pull messages")
    cs = c.add_subparsers(dest="consumer_cmd", required=True)
    p = cs.add_parser("ls", help="list a stream's consumers")
    p.add_argument("stream", help="stream name")
    common(p)
    p.set_defaults(admin=consumer_ls)
    p = cs.add_parser("info", help="a consumer's configuration and state")
    p.add_argument("stream", help="stream name")
    p.add_argument("consumer", help="consumer name")
    common(p)
    p.set_defaults(admin=consumer_info)
    p = cs.add_parser("add", help="create a durable consumer (pull unless --target)")
    p.add_argument("stream", help="stream name")
    p.add_argument("consumer", help="consumer name")
    p.add_argument("--filter", help="comma separated filter subjects")
    p.add_argument(
        "--deliver",
        choices=["all", "new", "last", "last_per_subject"],
        default="all",
        help="where to start (default %(default)s)",
    )
    p.add_argument(
        "--ack",
        choices=["explicit", "none", "all"],
        default="explicit",
        help="ack policy (default %(default)s)",
    )
    p.add_argument("--ack-wait", type=view.parse_duration, help="ack wait (30s, 5m)")
    p.add_argument("--max-deliver", type=int, default=-1, help="deliveries per message (-1: unlimited)")
    p.add_argument("--target", help="push: the deliver subject")
    common(p)
    p.set_defaults(admin=consumer_add)
    p = cs.add_parser("rm", help="delete a consumer")
    p.add_argument("stream", help="stream name")
    p.add_argument("consumer", help="consumer name")
    p.add_argument("-f", "--force", action="store_true", help="do not ask")
    common(p)
    p.set_defaults(admin=consumer_rm)
    p = cs.add_parser("next", help="pull messages from a pull consumer (and ack them)")
    p.add_argument("stream", help="stream name")
    p.add_argument("consumer", help="consumer name")
    p.add_argument("--count", type=int, default=1, help="messages to pull (default %(default)s)")
    p.add_argument("--no-ack", action="store_true", help="leave them unacknowledged")
    common(p)
    p.set_defaults(admin=consumer_next)
