"""Run the fault proxy: ``python -m harness.environment.proxy --control PORT --listener
name,mode,port,host:port [--listener ...] [--rewrite-addresses]``. Logs to stdout; SIGTERM or
SIGINT stops it."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from harness.environment.ports import LOOPBACK
from harness.environment.proxy.control import ControlApi
from harness.environment.proxy.listener import ListenerSpec
from harness.environment.proxy.server import ProxyServer

log = logging.getLogger("chaoslab.proxy")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m harness.environment.proxy")
    parser.add_argument("--control", type=int, required=True, help="control API port")
    parser.add_argument(
        "--listener",
        action="append",
        type=ListenerSpec.parse,
        required=True,
        help="name,mode,port,host:port (mode: kafka, tcp or mongo); repeat for each listener",
    )
    parser.add_argument(
        "--rewrite-addresses",
        action="store_true",
        help="in Metadata, FindCoordinator and DescribeCluster responses, replace each Kafka "
        "listener's upstream address by the listener's own (for brokers that advertise their "
        "own addresses)",
    )
    parser.add_argument(
        "--bind",
        default=LOOPBACK,
        help=f"the address to listen on (default {LOOPBACK}; in a container, 0.0.0.0: its own "
        "private interfaces)",
    )
    parser.add_argument("--verbose", action="store_true", help="log every connection's end")
    return parser.parse_args(argv)


async def serve(
    specs: list[ListenerSpec], control_port: int, *, rewrite: bool = False, bind: str = LOOPBACK
) -> None:
    proxy = ProxyServer(specs, rewrite=rewrite, bind=bind)
    await proxy.start()
    control = await asyncio.start_server(ControlApi(proxy).handle, bind, control_port)
    log.info("control API on %s:%d", bind, control_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("stopping")
    control.close()
    await proxy.close()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s.%(msecs)03d %(levelname)s %(message)s",
        datefmt="%H:%M:%S",
    )
    asyncio.run(serve(args.listener, args.control, rewrite=args.rewrite_addresses, bind=args.bind))


if __name__ == "__main__":
    main()
