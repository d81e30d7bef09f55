-- wrk script for `scripts/bench-load`: SubmitServiceJob with a unique job name per request.
-- The jobs sleep, so after the first instances fill up every further job waits RUNNABLE:
-- this measures the durable submit path with a deep queue behind it.
local counter = 0
local thread_id = 0
local threads = {}

function setup(thread)
  thread:set("id", thread_id)
  thread_id = thread_id + 1
  table.insert(threads, thread)
end

function init(args)
  counter = 0
end

local payload = '{\\"TrainingJobName\\":\\"load\\",\\"RoleArn\\":\\"arn:aws:iam::123456789012:role/x\\",'
  .. '\\"AlgorithmSpecification\\":{\\"TrainingInputMode\\":\\"File\\",\\"ContainerEntrypoint\\":[\\"sleep\\",\\"86399\\"]},'
  .. '\\"ResourceConfig\\":{\\"InstanceType\\":\\"ml.g5.xlarge\\",\\"InstanceCount\\":1,\\"VolumeSizeInGB\\":1},'
  .. '\\"OutputDataConfig\\":{\\"S3OutputPath\\":\\"s3://b/o\\"}}'

function request()
  counter = counter + 1
  local body = string.format(
    '{"jobName":"load-%d-%d","jobQueue":"load-q","serviceJobType":"SAGEMAKER_TRAINING",'
      .. '"quotaShareName":"load","schedulingPriority":%d,"serviceRequestPayload":"%s"}',
    id, counter, counter % 10, payload)
  return wrk.format("POST", "/v1/submitservicejob", {["Content-Type"] = "application/json"}, body)
end
