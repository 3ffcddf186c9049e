"""A tiny asyncio web endpoint that publishes each request's JSON body with
the AsyncProducer, using only the standard library (asyncio.start_server).

    python examples/async_web_producer.py -c examples/queues.yaml --port 8090
    curl -X POST --data '{"id": 1, "item": "widget", "qty": 2}' http://127.0.0.1:8090/orders

POST /<queue> with a JSON body answers 202 and the message id; a bad queue
name or body answers 400 (MessageError), Redis away 503. It is an example:
one request per connection, no keep-alive, bodies up to 1 MiB.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

from smqsup import AsyncProducer
from smqsup.errors import BrokerConnectionError, MessageError, SmqsupError

HERE = Path(__file__).resolve().parent
MAX_BODY_BYTES = 1 << 20


def reply(writer: asyncio.StreamWriter, status: str, payload: dict[str, object]) -> None:
    data = json.dumps(payload).encode()
    writer.write(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                 f"Connection: close\r\n\r\n".encode() + data)


async def read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes]:
    """(method, path, body) of one HTTP/1.1 request; ValueError if it is not one we take."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    length = int(headers.get("content-length", "0"))
    if not 0 <= length <= MAX_BODY_BYTES:
        raise ValueError("body too large")
    return method, path, await reader.readexactly(length)


def handler(producer: AsyncProducer) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    """The connection handler: one request, one publish, one answer."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            method, path, raw = await read_request(reader)
            if method != "POST":
                reply(writer, "405 Method Not Allowed", {"error": "POST /<queue> with a JSON body"})
                return
            message_id = await producer.publish(path.strip("/"), json.loads(raw))
            # ---- LATER: await the handler's result here -----------------------------------
            # When the Producer can wait for a message's result, this is where the handler
            # will await it and answer 200 with it, instead of 202 and the id:
            #     result = await producer.result(message_id, timeout=5)
            # ---------------------------------------------------------------------------------
            reply(writer, "202 Accepted", {"id": message_id})
        except (ValueError, asyncio.IncompleteReadError, MessageError) as exc:  # JSONDecodeError is a ValueError
            reply(writer, "400 Bad Request", {"error": str(exc)})
        except BrokerConnectionError as exc:  # PublishNotSent, PublishUncertain: Redis away
            reply(writer, "503 Service Unavailable", {"error": str(exc)})
        finally:
            with contextlib.suppress(ConnectionError):  # the client went away: nothing to answer
                await writer.drain()
            writer.close()
    return handle


async def serve(config: str, host: str, port: int) -> None:
    # from_config: the same Redis (or embedded server) and namespace as the consumers.
    async with AsyncProducer.from_config(config) as producer:
        server = await asyncio.start_server(handler(producer), host, port)
        print(f"publishing POST /<queue> bodies on http://{host}:{port}/", flush=True)
        async with server:
            await server.serve_forever()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-c", "--config", default=str(HERE / "queues.yaml"))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    args = parser.parse_args()
    try:
        asyncio.run(serve(args.config, args.host, args.port))
    except SmqsupError as exc:  # a bad config: one line, as the CLI
        print(f"Error: {exc}")
        return exc.exit_code
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
