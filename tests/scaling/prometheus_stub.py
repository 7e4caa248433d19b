"""A small stand-in for Prometheus's HTTP API: instant queries answer no series, range queries a flat 2 req/s
per pool (its namespace and Deployment) on Prometheus's own grid (start, start + step, ... <= end). It can answer late (`delay`) or fail
range queries (`range_status`), and records every request (`hits`). For the loop's tests that need a
Prometheus that misbehaves on cue; the real one runs in tests/integration."""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


class Stub:
    def __init__(self, deployments: list[tuple[str, str]]) -> None:
        self.delay = 0.0
        self.range_status = 200
        self.deployments = list(deployments)  # (namespace, Deployment)
        self.hits = []  # (path, params)
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # noqa: ANN002
                pass

            def _params(self):
                url = urlparse(self.path)
                params = {k: v[0] for k, v in parse_qs(url.query).items()}
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    params.update({k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()})
                return url.path, params

            def _answer(self):
                path, params = self._params()
                stub.hits.append((path, params))
                if stub.delay:
                    time.sleep(stub.delay)
                if path.endswith("/query_range"):
                    if stub.range_status != 200:
                        body, code = {"status": "error", "errorType": "timeout", "error": "query timed out"}, stub.range_status
                    else:
                        start, end, step = float(params["start"]), float(params["end"]), float(params["step"])
                        points, t = [], start
                        while t <= end + 1e-9:  # Prometheus: start, start+step, ... <= end
                            points.append([t, "2.0"])
                            t += step
                        body = {"status": "success", "data": {"resultType": "matrix", "result": [
                            {"metric": {"namespace": namespace, "deployment": deployment}, "values": points}
                            for namespace, deployment in stub.deployments]}}
                        code = 200
                else:
                    body, code = {"status": "success", "data": {"resultType": "vector", "result": []}}, 200
                data = json.dumps(body).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass

            do_GET = do_POST = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
