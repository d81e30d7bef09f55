-- wrk script for bench/load/longrun.py: SubmitServiceJob of jobs that fail at once (their
-- entrypoint does not exist), so that millions of jobs pass through the server, are retired
-- and archived, in minutes.
local counter = 0
local thread_id = 0

function setup(thread)
  thread:set("id", thread_id)
  thread_id = thread_id + 1
end

local payload = '{\\"TrainingJobName\\":\\"churn\\",\\"RoleArn\\":\\"arn:aws:iam::123456789012:role/x\\",'
  .. '\\"AlgorithmSpecification\\":{\\"TrainingInputMode\\":\\"File\\",\\"ContainerEntrypoint\\":[\\"/nonexistent/qm-longrun\\"]},'
  .. '\\"ResourceConfig\\":{\\"InstanceType\\":\\"ml.g5.xlarge\\",\\"InstanceCount\\":1,\\"VolumeSizeInGB\\":1},'
  .. '\\"OutputDataConfig\\":{\\"S3OutputPath\\":\\"s3://b/o\\"}}'

function request()
  counter = counter + 1
  local body = string.format(
    '{"jobName":"churn-%d-%d-%d","jobQueue":"lr-q","serviceJobType":"SAGEMAKER_TRAINING",'
      .. '"quotaShareName":"churn","serviceRequestPayload":"%s"}',
    id, os.time(), counter, payload)
  return wrk.format("POST", "/v1/submitservicejob", {["Content-Type"] = "application/json"}, body)
end
