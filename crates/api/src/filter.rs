//! The `filters` of ListServiceJobs. AWS accepts one filter at a time, and whether `jobStatus`
//! still applies depends on which filter it is; both rules live here so the server's listing
//! code only asks [`JobFilter::matches`] and [`JobFilter::keeps_status_filter`].

use crate::error::{shown, ApiError};
use crate::types::KeyValuesPair;

/// The filter names ListServiceJobs knows.
pub const FILTER_NAMES: [&str; 5] = [
    "JOB_NAME",
    "BEFORE_CREATED_AT",
    "AFTER_CREATED_AT",
    "SHARE_IDENTIFIER",
    "QUOTA_SHARE_NAME",
];

/// One parsed ListServiceJobs filter.
#[derive(Clone, Debug, PartialEq)]
pub enum JobFilter {
    /// `JOB_NAME`: case-insensitive; a trailing `*` (removed from `value`) matches a prefix.
    JobName {
        /// The name, or the prefix when `prefix` is set.
        value: String,
        /// Whether the value ended with `*`.
        prefix: bool,
    },
    /// `BEFORE_CREATED_AT`: jobs created strictly before this epoch-ms time.
    BeforeCreatedAt(i64),
    /// `AFTER_CREATED_AT`: jobs created strictly after this epoch-ms time.
    AfterCreatedAt(i64),
    /// `SHARE_IDENTIFIER`: jobs with this fair-share identifier.
    ShareIdentifier(String),
    /// `QUOTA_SHARE_NAME`: jobs of this quota share.
    QuotaShareName(String),
}

/// Reads the `filters` member: none, or exactly one known filter with exactly one value.
pub fn parse_filters(filters: Option<&[KeyValuesPair]>) -> Result<Option<JobFilter>, ApiError> {
    let filters = filters.unwrap_or_default();
    let filter = match filters {
        [] => return Ok(None),
        [one] => one,
        many => {
            return Err(ApiError::client(format!(
                "filters has {} entries: ListServiceJobs takes one filter at a time; send one \
                 and filter further on your side",
                many.len()
            )))
        }
    };
    let known = FILTER_NAMES.join(", ");
    let Some(name) = filter.name.as_deref() else {
        return Err(ApiError::client(format!(
            "filters[0].name is missing: use one of {known}"
        )));
    };
    let value = match filter.values.as_deref().unwrap_or_default() {
        [value] => value.as_str(),
        values => {
            return Err(ApiError::client(format!(
                "filters[0].values has {} values: give exactly one",
                values.len()
            )))
        }
    };
    let parsed = match name {
        "JOB_NAME" => {
            let (stem, prefix) = match value.strip_suffix('*') {
                Some(stem) => (stem, true),
                None => (value, false),
            };
            if stem.is_empty() && !prefix {
                return Err(ApiError::client(
                    "filters[0].values[0] is empty: give a job name, or a prefix ending in '*'"
                        .to_string(),
                ));
            }
            JobFilter::JobName {
                value: stem.to_string(),
                prefix,
            }
        }
        "BEFORE_CREATED_AT" => JobFilter::BeforeCreatedAt(epoch_ms(value)?),
        "AFTER_CREATED_AT" => JobFilter::AfterCreatedAt(epoch_ms(value)?),
        "SHARE_IDENTIFIER" => JobFilter::ShareIdentifier(non_empty(value)?),
        "QUOTA_SHARE_NAME" => JobFilter::QuotaShareName(non_empty(value)?),
        other => {
            return Err(ApiError::client(format!(
                "filters[0].name {} is not a filter ListServiceJobs knows: use one of {known} \
                 (names are case-sensitive)",
                shown(other)
            )))
        }
    };
    Ok(Some(parsed))
}

fn epoch_ms(value: &str) -> Result<i64, ApiError> {
    match value.parse::<i64>() {
        Ok(ms) if ms >= 0 && value.bytes().all(|b| b.is_ascii_digit()) => Ok(ms),
        _ => Err(ApiError::client(format!(
            "filters[0].values[0] {} is not a time: give epoch milliseconds as a string of \
             digits, e.g. \"1774420000000\"",
            shown(value)
        ))),
    }
}

fn non_empty(value: &str) -> Result<String, ApiError> {
    if value.is_empty() {
        return Err(ApiError::client(
            "filters[0].values[0] is empty: give the value to match".to_string(),
        ));
    }
    Ok(value.to_string())
}

impl JobFilter {
    /// Whether a job with these attributes passes the filter.
    pub fn matches(
        &self,
        job_name: &str,
        created_at: i64,
        share_identifier: Option<&str>,
        quota_share_name: Option<&str>,
    ) -> bool {
        match self {
            JobFilter::JobName {
                value,
                prefix: false,
            } => job_name.eq_ignore_ascii_case(value),
            JobFilter::JobName {
                value,
                prefix: true,
            } => job_name
                .get(..value.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(value)),
            JobFilter::BeforeCreatedAt(t) => created_at < *t,
            JobFilter::AfterCreatedAt(t) => created_at > *t,
            JobFilter::ShareIdentifier(s) => share_identifier == Some(s.as_str()),
            JobFilter::QuotaShareName(s) => quota_share_name == Some(s.as_str()),
        }
    }

    /// Whether `jobStatus` still applies with this filter. AWS ignores `jobStatus` when a
    /// filter is given, except with SHARE_IDENTIFIER and QUOTA_SHARE_NAME.
    pub fn keeps_status_filter(&self) -> bool {
        matches!(
            self,
            JobFilter::ShareIdentifier(_) | JobFilter::QuotaShareName(_)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(name: &str, value: &str) -> Vec<KeyValuesPair> {
        vec![KeyValuesPair {
            name: Some(name.into()),
            values: Some(vec![value.into()]),
        }]
    }

    fn parsed(name: &str, value: &str) -> JobFilter {
        parse_filters(Some(&one(name, value))).unwrap().unwrap()
    }

    fn refused(filters: &[KeyValuesPair]) -> String {
        parse_filters(Some(filters))
            .unwrap_err()
            .message()
            .to_string()
    }

    #[test]
    fn no_filters_means_no_filter() {
        assert_eq!(parse_filters(None), Ok(None));
        assert_eq!(parse_filters(Some(&[])), Ok(None));
    }

    #[test]
    fn job_name_matches_case_insensitively() {
        let f = parsed("JOB_NAME", "test1");
        assert!(f.matches("Test1", 0, None, None));
        assert!(f.matches("test1", 0, None, None));
        assert!(!f.matches("test10", 0, None, None));
    }

    #[test]
    fn a_trailing_star_makes_job_name_a_prefix_match() {
        let f = parsed("JOB_NAME", "test1*");
        assert_eq!(
            f,
            JobFilter::JobName {
                value: "test1".into(),
                prefix: true
            }
        );
        assert!(f.matches("Test10", 0, None, None));
        assert!(f.matches("test1", 0, None, None));
        assert!(!f.matches("test", 0, None, None));
        assert!(!f.matches("tést10", 0, None, None));
    }

    #[test]
    fn created_at_filters_compare_strictly() {
        let before = parsed("BEFORE_CREATED_AT", "1000");
        assert!(before.matches("j", 999, None, None));
        assert!(!before.matches("j", 1000, None, None));
        let after = parsed("AFTER_CREATED_AT", "1000");
        assert!(after.matches("j", 1001, None, None));
        assert!(!after.matches("j", 1000, None, None));
    }

    #[test]
    fn share_filters_match_exactly_and_keep_the_status_filter() {
        let f = parsed("QUOTA_SHARE_NAME", "QS1");
        assert!(f.matches("j", 0, None, Some("QS1")));
        assert!(!f.matches("j", 0, None, Some("qs1")));
        assert!(!f.matches("j", 0, None, None));
        assert!(f.keeps_status_filter());
        let f = parsed("SHARE_IDENTIFIER", "teamA");
        assert!(f.matches("j", 0, Some("teamA"), None));
        assert!(f.keeps_status_filter());
        assert!(!parsed("JOB_NAME", "j").keeps_status_filter());
        assert!(!parsed("AFTER_CREATED_AT", "1").keeps_status_filter());
    }

    #[test]
    fn two_filters_are_refused() {
        let mut filters = one("JOB_NAME", "a");
        filters.extend(one("QUOTA_SHARE_NAME", "b"));
        assert!(refused(&filters).starts_with("filters has 2 entries"));
    }

    #[test]
    fn an_unknown_or_missing_filter_name_is_refused_listing_the_known_ones() {
        let m = refused(&one("job_name", "a"));
        assert!(
            m.starts_with("filters[0].name 'job_name' is not a filter"),
            "{m}"
        );
        assert!(m.contains("QUOTA_SHARE_NAME"), "{m}");
        let m = refused(&[KeyValuesPair {
            name: None,
            values: Some(vec!["a".into()]),
        }]);
        assert!(m.starts_with("filters[0].name is missing"), "{m}");
    }

    #[test]
    fn a_filter_needs_exactly_one_value() {
        let none = KeyValuesPair {
            name: Some("JOB_NAME".into()),
            values: None,
        };
        assert!(refused(&[none]).starts_with("filters[0].values has 0 values"));
        let two = KeyValuesPair {
            name: Some("JOB_NAME".into()),
            values: Some(vec!["a".into(), "b".into()]),
        };
        assert!(refused(&[two]).starts_with("filters[0].values has 2 values"));
    }

    #[test]
    fn a_time_that_is_not_epoch_milliseconds_is_refused() {
        for bad in ["2026-03-25", "-1", "", "1.5", "+5"] {
            let m = refused(&one("AFTER_CREATED_AT", bad));
            assert!(
                m.contains("give epoch milliseconds as a string of digits"),
                "{bad}: {m}"
            );
        }
    }

    #[test]
    fn empty_values_are_refused() {
        assert!(refused(&one("JOB_NAME", "")).starts_with("filters[0].values[0] is empty"));
        assert!(refused(&one("QUOTA_SHARE_NAME", "")).starts_with("filters[0].values[0] is empty"));
    }
}
