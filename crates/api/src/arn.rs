//! ARNs: the only resource identifiers AWS clients see. The server names its resources by plain
//! names inside; this module builds their ARNs for responses and reads ARNs (or plain names,
//! where the model allows either) from requests, refusing ARNs of another region, account or
//! service with a message that shows the ARN this server expects.

use crate::error::{shown, ApiError};
use crate::validate::is_resource_name;

/// This server's partition, region and account: the fixed parts of every ARN it issues.
#[derive(Clone, Debug)]
pub struct Arns {
    /// The partition, `aws`.
    pub partition: String,
    /// The region this server claims to be, e.g. `us-east-1`.
    pub region: String,
    /// The twelve-digit account id this server claims to be.
    pub account_id: String,
}

/// A Batch resource that an ARN names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resource {
    /// `service-environment/NAME`.
    ServiceEnvironment(String),
    /// `job-queue/NAME`.
    JobQueue(String),
    /// `scheduling-policy/NAME`.
    SchedulingPolicy(String),
    /// `job-queue/QUEUE/quota-share/NAME`.
    QuotaShare {
        /// The queue's name.
        queue: String,
        /// The share's name.
        share: String,
    },
    /// `service-job/JOB_ID`.
    ServiceJob(String),
}

impl Resource {
    /// How the resource is called in messages ("job queue", "quota share", ...).
    pub fn kind_name(&self) -> &'static str {
        match self {
            Resource::ServiceEnvironment(_) => "service environment",
            Resource::JobQueue(_) => "job queue",
            Resource::SchedulingPolicy(_) => "scheduling policy",
            Resource::QuotaShare { .. } => "quota share",
            Resource::ServiceJob(_) => "service job",
        }
    }
}

/// The resources whose request fields take "a name or an ARN".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResourceKind {
    /// A service environment.
    ServiceEnvironment,
    /// A job queue.
    JobQueue,
    /// A scheduling policy.
    SchedulingPolicy,
}

impl ResourceKind {
    fn name(self) -> &'static str {
        match self {
            ResourceKind::ServiceEnvironment => "service environment",
            ResourceKind::JobQueue => "job queue",
            ResourceKind::SchedulingPolicy => "scheduling policy",
        }
    }

    fn path(self) -> &'static str {
        match self {
            ResourceKind::ServiceEnvironment => "service-environment",
            ResourceKind::JobQueue => "job-queue",
            ResourceKind::SchedulingPolicy => "scheduling-policy",
        }
    }
}

/// The resource-part shapes this server issues, for messages.
const RESOURCE_SHAPES: &str = "service-environment/NAME, job-queue/NAME, \
    job-queue/QUEUE/quota-share/NAME, scheduling-policy/NAME or service-job/JOB_ID";

impl Arns {
    /// The ARNs of a server in `region` and `account_id`, partition `aws`.
    pub fn new(region: impl Into<String>, account_id: impl Into<String>) -> Self {
        Arns {
            partition: "aws".to_string(),
            region: region.into(),
            account_id: account_id.into(),
        }
    }

    fn batch(&self, resource: &str) -> String {
        format!(
            "arn:{}:batch:{}:{}:{}",
            self.partition, self.region, self.account_id, resource
        )
    }

    /// `arn:aws:batch:REGION:ACCOUNT:service-environment/NAME`.
    pub fn service_environment(&self, name: impl AsRef<str>) -> String {
        self.batch(&format!("service-environment/{}", name.as_ref()))
    }

    /// `arn:aws:batch:REGION:ACCOUNT:job-queue/NAME`.
    pub fn job_queue(&self, name: impl AsRef<str>) -> String {
        self.batch(&format!("job-queue/{}", name.as_ref()))
    }

    /// `arn:aws:batch:REGION:ACCOUNT:scheduling-policy/NAME`.
    pub fn scheduling_policy(&self, name: impl AsRef<str>) -> String {
        self.batch(&format!("scheduling-policy/{}", name.as_ref()))
    }

    /// `arn:aws:batch:REGION:ACCOUNT:job-queue/QUEUE/quota-share/SHARE`.
    pub fn quota_share(&self, queue: impl AsRef<str>, share: impl AsRef<str>) -> String {
        self.batch(&format!(
            "job-queue/{}/quota-share/{}",
            queue.as_ref(),
            share.as_ref()
        ))
    }

    /// `arn:aws:batch:REGION:ACCOUNT:service-job/JOB_ID`.
    pub fn service_job(&self, job_id: impl AsRef<str>) -> String {
        self.batch(&format!("service-job/{}", job_id.as_ref()))
    }

    /// `arn:aws:sagemaker:REGION:ACCOUNT:training-job/NAME`: what an attempt reports as its
    /// `serviceResourceId`, as SageMaker would name it.
    pub fn training_job(&self, name: impl AsRef<str>) -> String {
        format!(
            "arn:{}:sagemaker:{}:{}:training-job/{}",
            self.partition,
            self.region,
            self.account_id,
            name.as_ref()
        )
    }

    /// The ARN of a parsed resource (the inverse of [`Arns::parse`]).
    pub fn resource(&self, resource: &Resource) -> String {
        match resource {
            Resource::ServiceEnvironment(name) => self.service_environment(name),
            Resource::JobQueue(name) => self.job_queue(name),
            Resource::SchedulingPolicy(name) => self.scheduling_policy(name),
            Resource::QuotaShare { queue, share } => self.quota_share(queue, share),
            Resource::ServiceJob(id) => self.service_job(id),
        }
    }

    fn example(&self, resource: &str) -> String {
        self.batch(resource)
    }

    /// Reads a Batch ARN that request field `field` holds. Every part is checked: the `arn:`
    /// prefix, the partition, the service (`batch`), this server's region and account, and a
    /// resource part of a kind this server issues with valid names.
    pub fn parse(&self, field: &str, arn: &str) -> Result<Resource, ApiError> {
        let parts: Vec<&str> = arn.splitn(6, ':').collect();
        if parts.first() != Some(&"arn") || parts.len() < 6 {
            return Err(self.not_an_arn(field, arn));
        }
        let (partition, service, region, account, resource) =
            (parts[1], parts[2], parts[3], parts[4], parts[5]);
        self.check_issuer(field, partition, service, region, account)?;
        parse_resource(field, resource)
    }

    /// The error for a value that is not an ARN at all, with a hint at what went wrong.
    fn not_an_arn(&self, field: &str, arn: &str) -> ApiError {
        let hint = if arn.starts_with("arn%3A") || arn.starts_with("arn%3a") {
            " (it is still percent-encoded: decode it first)"
        } else if arn.starts_with("aws:") {
            " (it lacks the leading 'arn:')"
        } else {
            ""
        };
        ApiError::client(format!(
            "{field} must be an ARN such as {}, got {}{hint}",
            self.example("job-queue/NAME"),
            shown(arn)
        ))
    }

    /// Checks that an ARN's partition, service, region and account are this server's Batch.
    fn check_issuer(
        &self,
        field: &str,
        partition: &str,
        service: &str,
        region: &str,
        account: &str,
    ) -> Result<(), ApiError> {
        if partition != self.partition {
            return Err(ApiError::client(format!(
                "{field}: the ARN's partition {} is not this server's: use '{}' as in {}",
                shown(partition),
                self.partition,
                self.example("job-queue/NAME")
            )));
        }
        if service != "batch" {
            return Err(ApiError::client(format!(
                "{field}: the ARN names service {}, not 'batch': pass the ARN of a Batch resource \
                 ({RESOURCE_SHAPES})",
                shown(service)
            )));
        }
        if region != self.region {
            return Err(ApiError::client(format!(
                "{field}: the ARN's region {} is not this server's region '{}': use an ARN this \
                 server issued, such as {}",
                shown(region),
                self.region,
                self.example("job-queue/NAME")
            )));
        }
        if account != self.account_id {
            return Err(ApiError::client(format!(
                "{field}: the ARN's account {} is not this server's account '{}': use an ARN this \
                 server issued, such as {}",
                shown(account),
                self.account_id,
                self.example("job-queue/NAME")
            )));
        }
        Ok(())
    }

    /// Reads a field that takes the name or the ARN of a resource of `kind`, and returns the
    /// plain name.
    pub fn name_or_arn(
        &self,
        field: &str,
        value: &str,
        kind: ResourceKind,
    ) -> Result<String, ApiError> {
        if value.starts_with("arn:") {
            let resource = self.parse(field, value)?;
            return match (kind, resource) {
                (ResourceKind::ServiceEnvironment, Resource::ServiceEnvironment(name))
                | (ResourceKind::JobQueue, Resource::JobQueue(name))
                | (ResourceKind::SchedulingPolicy, Resource::SchedulingPolicy(name)) => Ok(name),
                (_, other) => Err(ApiError::client(format!(
                    "{field} takes a {} name or ARN ({}), but {} is a {} ARN",
                    kind.name(),
                    self.example(&format!("{}/NAME", kind.path())),
                    shown(value),
                    other.kind_name()
                ))),
            };
        }
        if !is_resource_name(value) {
            return Err(ApiError::client(format!(
                "{field} must be a {kind} name (1 to 128 letters, digits, hyphens and \
                 underscores) or ARN ({example}), got {got}",
                kind = kind.name(),
                example = self.example(&format!("{}/NAME", kind.path())),
                got = shown(value)
            )));
        }
        Ok(value.to_string())
    }

    /// Reads a field that takes only a quota-share ARN and returns `(queue, share)`.
    pub fn quota_share_arn(&self, field: &str, value: &str) -> Result<(String, String), ApiError> {
        let example = self.example("job-queue/QUEUE/quota-share/NAME");
        if !value.starts_with("arn:") {
            return Err(ApiError::client(format!(
                "{field} takes the quota share's ARN ({example}), not its name: got {}; \
                 CreateQuotaShare and ListQuotaShares return the ARN",
                shown(value)
            )));
        }
        match self.parse(field, value)? {
            Resource::QuotaShare { queue, share } => Ok((queue, share)),
            other => Err(ApiError::client(format!(
                "{field} takes a quota share ARN ({example}), but {} is a {} ARN",
                shown(value),
                other.kind_name()
            ))),
        }
    }

    /// Reads a field that takes only a scheduling-policy ARN and returns the policy name.
    pub fn scheduling_policy_arn(&self, field: &str, value: &str) -> Result<String, ApiError> {
        let example = self.example("scheduling-policy/NAME");
        if !value.starts_with("arn:") {
            let hint = if value.starts_with("aws:") {
                " (the AWS docs' example lacks the leading 'arn:'; add it)"
            } else {
                ""
            };
            return Err(ApiError::client(format!(
                "{field} takes the scheduling policy's ARN ({example}), got {}{hint}; \
                 CreateSchedulingPolicy returns the ARN",
                shown(value)
            )));
        }
        match self.parse(field, value)? {
            Resource::SchedulingPolicy(name) => Ok(name),
            other => Err(ApiError::client(format!(
                "{field} takes a scheduling policy ARN ({example}), but {} is a {} ARN",
                shown(value),
                other.kind_name()
            ))),
        }
    }
}

/// Reads an ARN's resource part: one of the kinds this server issues, with valid names.
fn parse_resource(field: &str, resource: &str) -> Result<Resource, ApiError> {
    let segments: Vec<&str> = resource.split('/').collect();
    let resource = match segments.as_slice() {
        ["service-environment", name] => {
            Resource::ServiceEnvironment(arn_name(field, "service environment", name)?)
        }
        ["job-queue", name] => Resource::JobQueue(arn_name(field, "job queue", name)?),
        ["scheduling-policy", name] => {
            Resource::SchedulingPolicy(arn_name(field, "scheduling policy", name)?)
        }
        ["job-queue", queue, "quota-share", share] => Resource::QuotaShare {
            queue: arn_name(field, "job queue", queue)?,
            share: arn_name(field, "quota share", share)?,
        },
        ["service-job", id] => Resource::ServiceJob(arn_name(field, "service job id", id)?),
        _ => {
            return Err(ApiError::client(format!(
                "{field}: the ARN's resource part {} is not one this server issues: expected \
                 {RESOURCE_SHAPES}",
                shown(resource)
            )))
        }
    };
    Ok(resource)
}

fn arn_name(field: &str, what: &str, name: &str) -> Result<String, ApiError> {
    if is_resource_name(name) {
        Ok(name.to_string())
    } else {
        Err(ApiError::client(format!(
            "{field}: the {what} in the ARN, {}, must be 1 to 128 letters, digits, hyphens and \
             underscores",
            shown(name)
        )))
    }
}

/// Percent-decodes a URI path label. botocore encodes the `{resourceArn}` of the tag
/// operations completely (`:` as `%3A`, `/` as `%2F`), so the server decodes the one path
/// segment with this before [`Arns::parse`].
pub fn decode_uri_label(field: &str, raw: &str) -> Result<String, ApiError> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok());
            match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                Some(byte) => out.push(byte),
                None => {
                    return Err(ApiError::client(format!(
                        "{field} has a malformed percent-escape at byte {i} of {}: encode the ARN \
                         with %XX escapes",
                        shown(raw)
                    )))
                }
            }
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| {
        ApiError::client(format!(
            "{field} does not decode to UTF-8 text: {}; pass the ARN percent-encoded as UTF-8",
            shown(raw)
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arns() -> Arns {
        Arns::new("us-east-1", "123456789012")
    }

    #[test]
    fn every_builder_uses_the_documented_format() {
        let a = arns();
        let p = "arn:aws:batch:us-east-1:123456789012";
        assert_eq!(
            a.service_environment("se"),
            format!("{p}:service-environment/se")
        );
        assert_eq!(a.job_queue("jq"), format!("{p}:job-queue/jq"));
        assert_eq!(
            a.scheduling_policy("sp"),
            format!("{p}:scheduling-policy/sp")
        );
        assert_eq!(
            a.quota_share("jq", "QS1"),
            format!("{p}:job-queue/jq/quota-share/QS1")
        );
        assert_eq!(
            a.service_job("a4d6c728-8ee8"),
            format!("{p}:service-job/a4d6c728-8ee8")
        );
        assert_eq!(
            a.training_job("AWSBatchjob1abc"),
            "arn:aws:sagemaker:us-east-1:123456789012:training-job/AWSBatchjob1abc"
        );
    }

    #[test]
    fn every_built_arn_parses_back_to_its_resource() {
        let a = arns();
        let resources = [
            Resource::ServiceEnvironment("se-1".into()),
            Resource::JobQueue("jq_1".into()),
            Resource::SchedulingPolicy("sp".into()),
            Resource::QuotaShare {
                queue: "jq".into(),
                share: "QS1".into(),
            },
            Resource::ServiceJob("a4d6c728-8ee8-4c65-8e2a-9a5e8f4b7c3d".into()),
        ];
        for r in resources {
            assert_eq!(a.parse("resourceArn", &a.resource(&r)), Ok(r));
        }
    }

    #[test]
    fn a_percent_encoded_quota_share_arn_from_the_tags_path_decodes_and_parses() {
        let encoded =
            "arn%3Aaws%3Abatch%3Aus-east-1%3A123456789012%3Ajob-queue%2Fjq%2Fquota-share%2FQS1";
        let decoded = decode_uri_label("resourceArn", encoded).unwrap();
        assert_eq!(decoded, arns().quota_share("jq", "QS1"));
        assert_eq!(
            arns().parse("resourceArn", &decoded),
            Ok(Resource::QuotaShare {
                queue: "jq".into(),
                share: "QS1".into()
            })
        );
    }

    #[test]
    fn a_still_encoded_arn_is_refused_with_a_hint_to_decode_it() {
        let err = arns()
            .parse("resourceArn", "arn%3Aaws%3Abatch")
            .unwrap_err();
        assert!(err.message().contains("percent-encoded"), "{err}");
    }

    #[test]
    fn a_malformed_percent_escape_is_refused() {
        let err = decode_uri_label("resourceArn", "arn%3").unwrap_err();
        assert!(
            err.message()
                .starts_with("resourceArn has a malformed percent-escape"),
            "{err}"
        );
    }

    #[test]
    fn an_arn_of_another_region_is_refused_naming_this_servers_region() {
        let other = Arns::new("eu-west-1", "123456789012").job_queue("jq");
        let err = arns().parse("jobQueue", &other).unwrap_err();
        assert!(
            err.message()
                .starts_with("jobQueue: the ARN's region 'eu-west-1'"),
            "{err}"
        );
        assert!(err.message().contains("'us-east-1'"), "{err}");
    }

    #[test]
    fn an_arn_of_another_account_is_refused_naming_this_servers_account() {
        let other = Arns::new("us-east-1", "999999999999").job_queue("jq");
        let err = arns().parse("jobQueue", &other).unwrap_err();
        assert!(err.message().contains("account '999999999999'"), "{err}");
        assert!(err.message().contains("'123456789012'"), "{err}");
    }

    #[test]
    fn an_arn_of_another_service_or_partition_is_refused() {
        let err = arns().parse("f", &arns().training_job("t")).unwrap_err();
        assert!(err.message().contains("service 'sagemaker'"), "{err}");
        let err = arns()
            .parse("f", "arn:aws-cn:batch:us-east-1:123456789012:job-queue/jq")
            .unwrap_err();
        assert!(err.message().contains("partition 'aws-cn'"), "{err}");
    }

    #[test]
    fn an_unknown_resource_kind_is_refused_listing_the_known_ones() {
        let err = arns()
            .parse(
                "f",
                "arn:aws:batch:us-east-1:123456789012:job-definition/jd:1",
            )
            .unwrap_err();
        assert!(
            err.message().contains("job-queue/QUEUE/quota-share/NAME"),
            "{err}"
        );
    }

    #[test]
    fn a_name_with_bad_characters_inside_an_arn_is_refused() {
        let err = arns()
            .parse("f", "arn:aws:batch:us-east-1:123456789012:job-queue/j q")
            .unwrap_err();
        assert!(err.message().contains("job queue in the ARN"), "{err}");
    }

    #[test]
    fn text_that_is_not_an_arn_is_refused_with_an_example() {
        let err = arns().parse("resourceArn", "jq").unwrap_err();
        assert!(err
            .message()
            .starts_with("resourceArn must be an ARN such as arn:aws:batch:"));
    }

    #[test]
    fn name_or_arn_accepts_a_plain_name_or_the_matching_arn() {
        let a = arns();
        assert_eq!(
            a.name_or_arn("jobQueue", "jq", ResourceKind::JobQueue),
            Ok("jq".into())
        );
        assert_eq!(
            a.name_or_arn("jobQueue", &a.job_queue("jq"), ResourceKind::JobQueue),
            Ok("jq".into())
        );
        assert_eq!(
            a.name_or_arn(
                "serviceEnvironment",
                &a.service_environment("se"),
                ResourceKind::ServiceEnvironment
            ),
            Ok("se".into())
        );
    }

    #[test]
    fn name_or_arn_refuses_an_arn_of_another_kind() {
        let a = arns();
        let err = a
            .name_or_arn(
                "jobQueue",
                &a.quota_share("jq", "s"),
                ResourceKind::JobQueue,
            )
            .unwrap_err();
        assert!(err.message().contains("is a quota share ARN"), "{err}");
    }

    #[test]
    fn name_or_arn_refuses_an_invalid_name() {
        let err = arns()
            .name_or_arn("jobQueue", "my queue", ResourceKind::JobQueue)
            .unwrap_err();
        assert!(
            err.message()
                .starts_with("jobQueue must be a job queue name"),
            "{err}"
        );
    }

    #[test]
    fn quota_share_fields_take_only_the_arn() {
        let a = arns();
        assert_eq!(
            a.quota_share_arn("quotaShareArn", &a.quota_share("jq", "QS1")),
            Ok(("jq".into(), "QS1".into()))
        );
        let err = a.quota_share_arn("quotaShareArn", "QS1").unwrap_err();
        assert!(err.message().contains("not its name"), "{err}");
        let err = a
            .quota_share_arn("quotaShareArn", &a.job_queue("jq"))
            .unwrap_err();
        assert!(err.message().contains("is a job queue ARN"), "{err}");
    }

    #[test]
    fn scheduling_policy_fields_take_only_the_arn_and_hint_at_the_docs_typo() {
        let a = arns();
        assert_eq!(
            a.scheduling_policy_arn("schedulingPolicyArn", &a.scheduling_policy("sp")),
            Ok("sp".into())
        );
        let err = a
            .scheduling_policy_arn(
                "schedulingPolicyArn",
                "aws:aws:batch:us-east-1:123456789012:scheduling-policy/sp",
            )
            .unwrap_err();
        assert!(err.message().contains("lacks the leading 'arn:'"), "{err}");
        let err = a
            .scheduling_policy_arn("schedulingPolicyArn", &a.job_queue("q"))
            .unwrap_err();
        assert!(err.message().contains("is a job queue ARN"), "{err}");
    }
}
