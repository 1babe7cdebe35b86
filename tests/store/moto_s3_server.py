#!/usr/bin/env python3
"""A real S3 API server for tests/store: moto's server mode on a free loopback port.

Started by the C++ test fixture with /usr/bin/python3. `--host ADDR` binds another address
than loopback (`moerl bench weights`' store_s3_netns runs it inside a network namespace, where
readers on other namespaces reach it at that namespace's address). It creates an IAM user with an
s3:* policy and an access key, creates the test bucket, then switches moto's IAM
authentication on (POST /moto-api/reset-auth with 0), so from then on every request must
carry a valid SigV4 signature from that key. It prints one JSON line
{endpoint, region, bucket, access_key_id, secret_access_key} and serves until its stdin
closes, so the server dies with the test process even if the test crashes.
"""
import argparse
import json
import logging
import os
import sys

# moto reads this at import. 6 MiB instead of S3's 5 MiB lets a test make a multipart
# upload with valid-for-us 5 MiB parts fail at completion (EntityTooSmall), to check that
# the client aborts it; the other tests use 6 MiB parts.
os.environ.setdefault("S3_UPLOAD_PART_MIN_SIZE", str(6 << 20))

import boto3  # noqa: E402
import requests  # noqa: E402
from moto.server import ThreadedMotoServer  # noqa: E402

REGION = "us-east-1"
BUCKET = "moerl-test-bucket"
S3_POLICY = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to serve on")
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no per-request lines
    server = ThreadedMotoServer(ip_address=args.host, port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"

    # Setup runs before authentication is on, so any credentials do here.
    admin = dict(endpoint_url=endpoint, region_name=REGION,
                 aws_access_key_id="setup", aws_secret_access_key="setup")
    iam = boto3.client("iam", **admin)
    iam.create_user(UserName="moerl-test")
    iam.put_user_policy(UserName="moerl-test", PolicyName="s3-all",
                        PolicyDocument=json.dumps(S3_POLICY))
    key = iam.create_access_key(UserName="moerl-test")["AccessKey"]
    boto3.client("s3", **admin).create_bucket(Bucket=BUCKET)

    # From here on moto checks the signature and the policy of every request.
    r = requests.post(f"{endpoint}/moto-api/reset-auth", data=b"0", timeout=30)
    r.raise_for_status()

    print(json.dumps({
        "endpoint": endpoint,
        "region": REGION,
        "bucket": BUCKET,
        "access_key_id": key["AccessKeyId"],
        "secret_access_key": key["SecretAccessKey"],
    }), flush=True)
    sys.stdin.read()  # serve until the parent closes our stdin (or dies)
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
