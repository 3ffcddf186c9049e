"""A tiny asyncio web endpoint that publishes each request's JSON body with
the AsyncProducer and answers with what the queue's handler returned, using
only the standard library (asyncio.start_server).

    python examples/async_web_producer.py -c examples/queues.yaml --port 8090
    curl -X POST --data '{"id": 1, "item": "widget", "qty": 2}' http://127.0.0.1:8090/orders

POST /<queue> with a JSON body publishes it tracked and awaits its result:
200 with the id and the result once the handler returned, 422 with the
reason if the message ended in the dead letters, 202 with the id and its
state if it has not ended within RESULT_WAIT_S (the consumers are busy or
down; it stays queued). A bad queue name or body answers 400
(MessageError), Redis away 503. It is an example: one request per
connection, no keep-alive, bodies up to 1 MiB.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

from smqsup import AsyncProducer, MessageFailed
from smqsup.errors import BrokerConnectionError, MessageError, SmqsupError

HERE = Path(__file__).resolve().parent
MAX_BODY_BYTES = 1 << 20
#: How long a request waits for its message's result, s.
RESULT_WAIT_S = 5.0
#: How long the result is kept after the message ended, s (for asking again by id, with state()).
RESULT_TTL_S = 600


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


async def publish_and_wait(producer: AsyncProducer, writer: asyncio.StreamWriter, queue: str,
                           body: object) -> None:
    """Publish ``body`` tracked, await what its handler returns and answer with it."""
    message_id = await producer.publish(queue, body, result_ttl=RESULT_TTL_S)
    try:
        result = await producer.result(queue, message_id, timeout=RESULT_WAIT_S)
    except TimeoutError:  # not ended yet: still queued or running; the id to ask about it later
        reply(writer, "202 Accepted", {"id": message_id, "state": await producer.state(queue, message_id)})
    except MessageFailed as exc:  # rejected, failed every attempt, expired...
        reply(writer, "422 Unprocessable Content", {"id": message_id, "error": exc.reason})
    else:
        reply(writer, "200 OK", {"id": message_id, "result": result})


def handler(producer: AsyncProducer) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    """The connection handler: one request, one publish, one awaited result, one answer."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            method, path, raw = await read_request(reader)
            if method != "POST":
                reply(writer, "405 Method Not Allowed", {"error": "POST /<queue> with a JSON body"})
                return
            await publish_and_wait(producer, writer, path.strip("/"), json.loads(raw))
        except (ValueError, asyncio.IncompleteReadError, MessageError) as exc:  # JSONDecodeError is a ValueError
            reply(writer, "400 Bad Request", {"error": str(exc)})
        except BrokerConnectionError as exc:  # PublishNotSent, PublishUncertain, a wait's read: Redis away
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
