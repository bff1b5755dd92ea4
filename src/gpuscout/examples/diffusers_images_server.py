"""Serve a diffusers text-to-image pipeline as an OpenAI-compatible `POST /v1/images/generations`.

For load-testing a local diffusers model with gpuscout, which speaks the OpenAI images API:

    python examples/diffusers_images_server.py --pipeline ./my-sd-pipeline --steps 30 --port 8000
    gpuscout load http://127.0.0.1:8000 -m my-sd --endpoint images --sweep 1,2,4

`--pipeline` is a folder `DiffusionPipeline.from_pretrained` reads (or a Hub id when the machine can
reach the Hub); `--device cuda` puts it on the GPU. `--tiny` builds a Stable Diffusion pipeline from
small configs with random weights instead (nothing downloaded, a few ms an image on a CPU): its images
are noise, but every part a real request goes through runs — tokenizer, text encoder, UNet steps,
VAE decode, PNG encoding — which is what gpuscout's own tests use it for.

One request at a time goes through the pipeline (a lock), as on one GPU; the others wait in the
server's queue, as they would on any single-replica image server. The request's `n` is the pipeline's
`num_images_per_prompt`, and `size` ("WxH") its width and height. Each answer is
`{"created": …, "data": [{"b64_json": <PNG>}, …]}`.

`GET /_records` returns what the server did, per request, in `time.perf_counter()` seconds (on Linux
CLOCK_MONOTONIC, one clock for every process of the host): when it had the request, when the
pipeline started on it, when it began writing the answer, and how many images. A load test's timings can
be held against it. `GET /health` answers 200 once the pipeline is loaded and warmed up.

The first line on stdout is `PORT <n>`, printed once the server listens.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import importlib
import io
import json
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MAX_BODY_BYTES = 1 << 20
MAX_IMAGES = 8


def tiny_pipeline(seed: int = 0) -> Any:
    """A Stable Diffusion pipeline from small configs, random weights, a byte-level CLIP tokenizer."""
    import torch
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    d = _diffusers()
    torch.manual_seed(seed)
    unet = d.UNet2DConditionModel(block_out_channels=(8, 16), layers_per_block=1, sample_size=8, in_channels=4,
                                out_channels=4, down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
                                up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=16,
                                norm_num_groups=8, attention_head_dim=2)
    vae = d.AutoencoderKL(block_out_channels=(8, 16), in_channels=3, out_channels=3,
                        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                        latent_channels=4, norm_num_groups=8, sample_size=16)
    encoder = CLIPTextModel(CLIPTextConfig(bos_token_id=0, eos_token_id=2, pad_token_id=1, hidden_size=16,
                                           intermediate_size=32, num_attention_heads=2, num_hidden_layers=2,
                                           vocab_size=600, projection_dim=16))
    folder = Path(tempfile.mkdtemp(prefix="tiny-clip-"))
    (folder / "vocab.json").write_text(json.dumps(_byte_vocab()))
    (folder / "merges.txt").write_text("#version: 0.2\n")  # no merges: every byte is a token
    tokenizer = CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"), model_max_length=77)
    scheduler = d.DDIMScheduler(clip_sample=False, set_alpha_to_one=False)
    return d.StableDiffusionPipeline(vae=vae, text_encoder=encoder, tokenizer=tokenizer, unet=unet, scheduler=scheduler,
                                   safety_checker=None, feature_extractor=None, requires_safety_checker=False)


def _diffusers() -> Any:
    """diffusers, imported when a pipeline is built (its classes carry no type annotations)."""
    return importlib.import_module("diffusers")


def _byte_vocab() -> dict[str, int]:
    """CLIP's special tokens and one token per byte (GPT-2's printable mapping of the 256 bytes), with and
    without the end-of-word mark."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = [chr(b) for b in printable] + [chr(256 + i) for i in range(256 - len(printable))]
    vocab = {"<|startoftext|>": 0, "!": 1, "<|endoftext|>": 2}
    for c in chars:
        for token in (c, c + "</w>"):
            vocab.setdefault(token, len(vocab))
    return vocab


class ImageServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], pipe: Any, steps: int) -> None:
        super().__init__(address, Handler)
        self.pipe, self.steps = pipe, steps
        self.lock = threading.Lock()  # one generation at a time, as on one GPU
        self.records: list[dict[str, Any]] = []

    def generate(self, prompt: str, n: int, width: int, height: int) -> list[str]:
        """n PNG images of `prompt`, base64."""
        out = self.pipe(prompt, num_inference_steps=self.steps, width=width, height=height,
                        num_images_per_prompt=n, output_type="pil")
        encoded = []
        for image in out.images:
            png = io.BytesIO()
            image.save(png, format="PNG")
            encoded.append(base64.b64encode(png.getvalue()).decode())
        return encoded


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as every real server
    # The head and the body go out in two writes; with Nagle's algorithm on, the body waits for the client's
    # delayed ACK of the head (40 ms on Linux), which the first version of this server added to every image.
    disable_nagle_algorithm = True
    server: ImageServer

    def log_message(self, format: str, *args: Any) -> None:  # the base class's signature
        pass  # quiet: a load test sends thousands

    def do_GET(self) -> None:
        if self.path == "/_records":
            self._json(200, self.server.records)
        elif self.path == "/health":
            self._json(200, {"status": "ok"})
        else:
            self._json(404, {"error": {"message": f"no route GET {self.path}"}})

    def do_POST(self) -> None:
        received = time.perf_counter()
        length = int(self.headers.get("content-length") or 0)
        if self.path.rstrip("/") != "/v1/images/generations":
            self._skip(length)
            self._json(404, {"error": {"message": f"no route POST {self.path}"}})
            return
        if length > MAX_BODY_BYTES:
            self._json(413, {"error": {"message": "request body too large"}}, close=True)
            return
        try:
            prompt, n, width, height = _request(json.loads(self.rfile.read(length)))
        except (ValueError, TypeError) as exc:
            self._json(400, {"error": {"message": str(exc), "type": "invalid_request_error"}})
            return
        with self.server.lock:
            started = time.perf_counter()
            images = self.server.generate(prompt, n, width, height)
        answer = {"created": int(time.time()), "data": [{"b64_json": b} for b in images]}
        # stamped before the first byte of the answer goes out: a client's end can only come after it
        self.server.records.append({"prompt": prompt, "received_s": received, "started_s": started,
                                    "end_s": time.perf_counter(), "images": len(images)})
        self._json(200, answer)

    def _json(self, status: int, obj: object, close: bool = False) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        if close:
            self.send_header("connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def _skip(self, length: int) -> None:
        if 0 < length <= MAX_BODY_BYTES:
            self.rfile.read(length)


def _request(req: Any) -> tuple[str, int, int, int]:
    """prompt, n, width, height of an OpenAI images request; ValueError says what is wrong."""
    if not isinstance(req, dict) or not isinstance(req.get("prompt"), str) or not req["prompt"]:
        raise ValueError("'prompt' must be a non-empty string")
    n = req.get("n", 1)
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_IMAGES:
        raise ValueError(f"'n' must be a whole number from 1 to {MAX_IMAGES}")
    size = req.get("size") or "32x32"
    try:
        width, height = (int(x) for x in str(size).lower().split("x"))
    except ValueError:
        raise ValueError(f"'size' must be WIDTHxHEIGHT, e.g. 512x512, not {size!r}") from None
    if width % 8 or height % 8 or not (8 <= width <= 4096 and 8 <= height <= 4096):
        raise ValueError("width and height must be multiples of 8 from 8 to 4096")
    return req["prompt"], n, width, height


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--pipeline", help="a diffusers pipeline folder (or Hub id), for from_pretrained")
    group.add_argument("--tiny", action="store_true", help="a tiny random Stable Diffusion pipeline (for tests)")
    ap.add_argument("--device", default="cpu", help="torch device, e.g. cuda")
    ap.add_argument("--steps", type=int, default=4, help="denoising steps per image")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000, help="0: any free port (printed)")
    args = ap.parse_args()
    pipe = tiny_pipeline() if args.tiny else _diffusers().DiffusionPipeline.from_pretrained(args.pipeline)
    pipe = pipe.to(args.device)
    pipe.set_progress_bar_config(disable=True)
    # The pipeline's thread holds the interpreter between its tensor operations; a connection's thread then
    # waits up to the switch interval (5 ms by default) at each step of reading a request, and its receipt is
    # stamped tens of ms late. A short interval keeps the record near the time the bytes arrived.
    sys.setswitchinterval(1e-4)
    server = ImageServer((args.host, args.port), pipe, args.steps)
    for _ in range(2):  # first calls pay for lazy initialisation: not what a load test should time
        server.generate("warm-up", 1, 32, 32)
    print(f"PORT {server.server_address[1]}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C stops the server; nothing to keep
        server.serve_forever()


if __name__ == "__main__":
    main()
