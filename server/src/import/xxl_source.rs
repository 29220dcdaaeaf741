//! Reads XXL-JOB's executor groups and jobs from its MySQL (or MariaDB) database, read only.

use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::{ConnectOptions, Row};

use super::xxl_mapping::{XxlGroup, XxlJob};
use crate::store::{Backend, DatabaseUrl};

/// Why XXL-JOB's database could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("{url} is not a mysql:// URL: {reason}")]
    Url { url: String, reason: String },
    #[error("cannot connect to XXL-JOB's database at {url}: {source}")]
    Connect { url: String, source: sqlx::Error },
    #[error(
        "cannot read {table} at {url} (is this XXL-JOB 2.3 or 2.4's database? the import reads \
         its schedule_type column, which 2.3 introduced): {source}"
    )]
    Read {
        url: String,
        table: &'static str,
        source: sqlx::Error,
    },
}

/// Everything the import reads: the groups and the jobs.
#[derive(Debug, Clone)]
pub struct XxlDatabase {
    pub groups: Vec<XxlGroup>,
    pub jobs: Vec<XxlJob>,
}

/// Reads `xxl_job_group` and `xxl_job_info` from the database at `url`.
pub async fn read(url: &str) -> Result<XxlDatabase, SourceError> {
    let parsed = DatabaseUrl::parse(url)
        .ok()
        .filter(|u| u.backend() == Backend::Mysql)
        .ok_or_else(|| SourceError::Url {
            url: DatabaseUrl::parse(url)
                .map_or_else(|_| "the --from URL".to_owned(), |u| u.to_string()),
            reason: "XXL-JOB keeps its jobs in MySQL: give mysql://user:password@host:3306/xxl_job"
                .to_owned(),
        })?;
    let shown = parsed.to_string();
    let options: MySqlConnectOptions =
        parsed
            .expose()
            .parse()
            .map_err(|e: sqlx::Error| SourceError::Url {
                url: shown.clone(),
                reason: e.to_string(),
            })?;
    let mut connection: MySqlConnection =
        options
            .connect()
            .await
            .map_err(|source| SourceError::Connect {
                url: shown.clone(),
                source,
            })?;
    let read_error = |table: &'static str| {
        let url = shown.clone();
        move |source| SourceError::Read { url, table, source }
    };
    let groups = sqlx::query(
        "SELECT CAST(id AS SIGNED) AS id, app_name, COALESCE(title, '') AS title \
         FROM xxl_job_group ORDER BY id",
    )
    .fetch_all(&mut connection)
    .await
    .map_err(read_error("xxl_job_group"))?
    .iter()
    .map(|row| {
        Ok(XxlGroup {
            id: row.try_get("id")?,
            app_name: row.try_get("app_name")?,
            title: row.try_get("title")?,
        })
    })
    .collect::<Result<Vec<_>, sqlx::Error>>()
    .map_err(read_error("xxl_job_group"))?;
    let jobs = sqlx::query(
        "SELECT CAST(id AS SIGNED) AS id, CAST(job_group AS SIGNED) AS job_group, \
         COALESCE(job_desc, '') AS job_desc, COALESCE(author, '') AS author, \
         COALESCE(alarm_email, '') AS alarm_email, COALESCE(schedule_type, 'NONE') AS schedule_type, \
         COALESCE(schedule_conf, '') AS schedule_conf, \
         COALESCE(misfire_strategy, '') AS misfire_strategy, \
         COALESCE(executor_route_strategy, '') AS executor_route_strategy, \
         COALESCE(executor_handler, '') AS executor_handler, \
         COALESCE(executor_param, '') AS executor_param, \
         COALESCE(executor_block_strategy, '') AS executor_block_strategy, \
         CAST(executor_timeout AS SIGNED) AS executor_timeout, \
         CAST(executor_fail_retry_count AS SIGNED) AS executor_fail_retry_count, \
         COALESCE(glue_type, '') AS glue_type, COALESCE(child_jobid, '') AS child_jobid, \
         CAST(trigger_status AS SIGNED) AS trigger_status \
         FROM xxl_job_info ORDER BY id",
    )
    .fetch_all(&mut connection)
    .await
    .map_err(read_error("xxl_job_info"))?
    .iter()
    .map(|row| {
        Ok(XxlJob {
            id: row.try_get("id")?,
            job_group: row.try_get("job_group")?,
            job_desc: row.try_get("job_desc")?,
            author: row.try_get("author")?,
            alarm_email: row.try_get("alarm_email")?,
            schedule_type: row.try_get("schedule_type")?,
            schedule_conf: row.try_get("schedule_conf")?,
            misfire_strategy: row.try_get("misfire_strategy")?,
            executor_route_strategy: row.try_get("executor_route_strategy")?,
            executor_handler: row.try_get("executor_handler")?,
            executor_param: row.try_get("executor_param")?,
            executor_block_strategy: row.try_get("executor_block_strategy")?,
            executor_timeout: row.try_get("executor_timeout")?,
            executor_fail_retry_count: row.try_get("executor_fail_retry_count")?,
            glue_type: row.try_get("glue_type")?,
            child_jobid: row.try_get("child_jobid")?,
            trigger_status: row.try_get("trigger_status")?,
        })
    })
    .collect::<Result<Vec<_>, sqlx::Error>>()
    .map_err(read_error("xxl_job_info"))?;
    Ok(XxlDatabase { groups, jobs })
}
