"""Finds credentials as any AWS SDK program would, with no configuration of its own, and writes
to $RESULT_FILE (JSON) where boto3 found them (`method`), their key id, who STS says they
are (`arn`), and the text of s3://$BUCKET/$KEY read with them; with $REFUSED_BUCKET, also the
error code of reading $KEY there (`refused`)."""

import json
import os

import boto3

session = boto3.Session()
creds = session.get_credentials()
result = {"method": creds.method, "access_key": creds.get_frozen_credentials().access_key}
result["arn"] = session.client("sts").get_caller_identity()["Arn"]
obj = session.client("s3").get_object(Bucket=os.environ["BUCKET"], Key=os.environ["KEY"])
result["data"] = obj["Body"].read().decode()
if os.environ.get("REFUSED_BUCKET"):
    from botocore.exceptions import ClientError
    try:
        session.client("s3").get_object(Bucket=os.environ["REFUSED_BUCKET"], Key=os.environ["KEY"])
        result["refused"] = None
    except ClientError as e:
        result["refused"] = e.response["Error"]["Code"]
with open(os.environ["RESULT_FILE"] + ".tmp", "w") as f:
    json.dump(result, f)
os.rename(os.environ["RESULT_FILE"] + ".tmp", os.environ["RESULT_FILE"])
