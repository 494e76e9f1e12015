"""The S3 store Tansu keeps its log and committed offsets in (moto's server, in memory)."""

from __future__ import annotations

import sys
import urllib.request

from harness.environment.local.server import LocalServer
from harness.environment.ports import LOOPBACK

BUCKET = "tansu"
# moto accepts any credentials; Tansu's S3 client insists on having some.
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "chaoslab",
    "AWS_SECRET_ACCESS_KEY": "chaoslab",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class MotoS3(LocalServer):
    # Restarting moto wipes every topic: it is never a fault target.
    name = "s3"
    role = "S3 store for Kafka's data (moto)"

    @property
    def endpoint(self) -> str:
        return f"http://{self.address}"

    def argv(self) -> list[str]:
        # Not moto_server: see moto_server_serialized for the race it avoids.
        return [
            sys.executable,
            "-m",
            "harness.environment.local.moto_server_serialized",
            "-H",
            LOOPBACK,
            "-p",
            str(self.port),
        ]

    def probe(self) -> None:
        with urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=1) as response:
            response.read()

    def on_first_ready(self) -> None:
        import boto3

        s3 = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=CREDENTIALS["AWS_DEFAULT_REGION"],
        )
        s3.create_bucket(Bucket=BUCKET)
