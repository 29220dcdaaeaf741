//! Child jobs on the three backends: the runs a run's ending triggers, created in the same
//! transaction as the ending, so no node can die between the two; and what the API reads of
//! them.

/// A run that follows another's end (a child job's, a workflow's next step).
pub(super) struct FollowUp<'a> {
    pub(super) job_id: i64,
    pub(super) partition_id: i64,
    /// The node that created the run it follows.
    pub(super) node_id: &'a str,
    /// `child` or `step`.
    pub(super) trigger_kind: &'static str,
    /// JSON.
    pub(super) input: &'a str,
    /// The job's arguments and policy (JSON): a run that is one attempt with the job's
    /// arguments (`JobPolicy::starts_as_one_attempt`) starts here, with its attempt, so no
    /// start pass (and its commit) stands between a step and the next. The policy also gives
    /// the run's priority.
    pub(super) args_json: &'a str,
    pub(super) policy_json: &'a str,
}

/// Implements it for one backend's store; see `super` for the arguments.
macro_rules! follow_ups_store {
    ($store:ident, $db:ty, $backend:expr) => {
        impl $store {
            /// What follows, inside the caller's transaction, the runs `ended` there: their
            /// child jobs' runs, and the next steps of the workflow runs they are steps of
            /// (and so on, when a workflow run ends with them). Returns how many runs it
            /// created.
            async fn follow_ups_in(
                &self,
                tx: &mut Tx<$db>,
                ended: &[EndedRun],
            ) -> Result<FollowedUp, Error> {
                let mut followed = FollowedUp::default();
                let mut batch = ended.to_vec();
                while !batch.is_empty() {
                    followed.created += self.children_in(tx, &batch).await?;
                    let (steps, workflows_ended) = self.steps_ended_in(tx, &batch).await?;
                    followed.created += steps;
                    followed
                        .workflows_ended
                        .extend(workflows_ended.iter().cloned());
                    batch = workflows_ended;
                }
                Ok(followed)
            }

            /// Creates, inside the caller's transaction, the child runs of the runs `ended`
            /// there: one per (run, child job), in the child's partition, pending, with the
            /// parent's run, state and output as input. Returns how many were created.
            async fn children_in(
                &self,
                tx: &mut Tx<$db>,
                ended: &[EndedRun],
            ) -> Result<usize, Error> {
                let mut job_ids: Vec<i64> = ended
                    .iter()
                    .filter(|r| {
                        r.may_have_children && r.job_id > 0 && !triggered_lists(&r.state).is_empty()
                    })
                    .map(|r| r.job_id)
                    .collect();
                job_ids.sort_unstable();
                job_ids.dedup();
                let Some(parents) = with_partitions(&self.q.parents_with_children, &job_ids) else {
                    return Ok(0);
                };
                let parents: Vec<(i64, String, String)> =
                    rows_as(&sqlx::raw_sql(parents).fetch_all(&mut **tx).await?)?;
                // (child job, index of the parent run in `ended`)
                let mut wanted: Vec<(i64, usize)> = Vec::new();
                for (i, run) in ended.iter().enumerate() {
                    let Some((_, _, policy)) = parents.iter().find(|p| p.0 == run.job_id) else {
                        continue;
                    };
                    let lists = triggered_lists(&run.state);
                    let named = match policy_children(policy) {
                        Ok(named) => named,
                        Err(e) => {
                            // Nobody waits for an answer here: the run's end stands, and the
                            // children it would have started are reported as not started.
                            tracing::error!(
                                parent_run = run.run_id,
                                parent_job = run.job_id,
                                error = %e,
                                "the stored policy of the parent job is unreadable; \
                                 its children do not run"
                            );
                            continue;
                        }
                    };
                    let mut children: Vec<i64> = named
                        .into_iter()
                        .filter(|(list, _)| lists.contains(list))
                        .map(|(_, id)| id)
                        .collect();
                    // A child named in two lists that both apply runs once.
                    children.sort_unstable();
                    children.dedup();
                    wanted.extend(children.into_iter().map(|c| (c, i)));
                }
                let mut child_ids: Vec<i64> = wanted.iter().map(|(c, _)| *c).collect();
                child_ids.sort_unstable();
                child_ids.dedup();
                let Some(lock) = with_partitions(&self.q.child_jobs_lock, &child_ids) else {
                    return Ok(0);
                };
                let children: Vec<(i64, i64, String, String)> =
                    rows_as(&sqlx::raw_sql(lock).fetch_all(&mut **tx).await?)?;
                wanted.sort_by_key(|(child, i)| (*child, ended[*i].run_id));
                let now: i64 = sqlx::query_scalar::<$db, i64>(sql(&self.q.now))
                    .fetch_one(&mut **tx)
                    .await?;
                // (parent run, child job, the child job's row, the child run's input)
                let mut made = Vec::with_capacity(wanted.len());
                for (child, i) in wanted {
                    let parent = &ended[i];
                    let Some(job) = children.iter().find(|j| j.0 == child) else {
                        // Deleted since the parent's policy named it (a deletion of a job
                        // that is a child is refused; this is the race with it).
                        tracing::warn!(
                            parent_run = parent.run_id,
                            child_job = child,
                            "a child job is gone; its run is not created"
                        );
                        continue;
                    };
                    let name = parents
                        .iter()
                        .find(|p| p.0 == parent.job_id)
                        .map_or("", |p| p.1.as_str());
                    made.push((parent, job, parent.child_input(name)));
                }
                let follow_ups: Vec<FollowUp<'_>> = made
                    .iter()
                    .map(
                        |(parent, (child, partition_id, policy, args), input)| FollowUp {
                            job_id: *child,
                            partition_id: *partition_id,
                            node_id: &parent.node_id,
                            trigger_kind: "child",
                            input,
                            args_json: args,
                            policy_json: policy,
                        },
                    )
                    .collect();
                let runs = self.follow_up_runs_in(tx, &follow_ups, now).await?;
                if runs.is_empty() {
                    return Ok(0);
                }
                let mut record = sqlx::QueryBuilder::<$db>::new(
                    "INSERT INTO child_runs (parent_run_id, child_job_id, child_run_id, \
                    created_at_ms) ",
                );
                let now_expr: &str = &self.q.now_expr;
                record.push_values(
                    made.iter().zip(&runs),
                    |mut row, ((parent, job, _), run)| {
                        row.push_bind(parent.run_id)
                            .push_bind(job.0)
                            .push_bind(run.0)
                            .push(now_expr);
                    },
                );
                record.build().execute(&mut **tx).await?;
                Ok(runs.len())
            }

            /// Inserts the runs `runs`, each at the first free millisecond of its job from
            /// `now_ms` (the jobs are locked by the caller, so no other follow-up takes one
            /// meanwhile; two of one job here take consecutive ones), `running` with its
            /// attempt when it is one attempt with its job's arguments, `pending` otherwise.
            /// Returns each one's id and instant, in order. A fan-out of 50 costs 50 inserts
            /// (and, on MySQL, which has no `RETURNING`, 50 reads of the ids) and one insert
            /// of their attempts.
            async fn follow_up_runs_in(
                &self,
                tx: &mut Tx<$db>,
                runs: &[FollowUp<'_>],
                now_ms: i64,
            ) -> Result<Vec<(i64, i64)>, Error> {
                let returning: Option<Arc<str>> = ($backend != Backend::Mysql)
                    .then(|| format!("{} RETURNING run_id", self.q.child_run_insert).into());
                let mut next_free: HashMap<i64, i64> = HashMap::new();
                let mut inserted = Vec::with_capacity(runs.len());
                let mut firsts = Vec::new();
                for run in runs {
                    let policy = StoredPolicy::from(run.policy_json.to_owned());
                    // A policy that does not read leaves the run pending: its start fails it,
                    // naming the policy.
                    let one_attempt = policy.decoded().is_some_and(|p| p.starts_as_one_attempt());
                    let priority = i64::from(policy_priority(&policy));
                    let state = if one_attempt {
                        run_state::RUNNING
                    } else {
                        run_state::PENDING
                    };
                    let from = next_free.get(&run.job_id).copied().unwrap_or(now_ms);
                    let mut placed = None;
                    for at in from..from + 1_000 {
                        let insert = sqlx::query::<$db>(match &returning {
                            Some(query) => AssertSqlSafe(Arc::clone(query)),
                            None => sql(&self.q.child_run_insert),
                        })
                        .bind(run.job_id)
                        .bind(at)
                        .bind(run.partition_id)
                        .bind(run.node_id)
                        .bind(run.trigger_kind)
                        .bind(state)
                        .bind(priority)
                        .bind(state)
                        .bind(run.input)
                        .bind(run.job_id)
                        .bind(at);
                        let run_id = if returning.is_some() {
                            match insert.fetch_optional(&mut **tx).await? {
                                Some(row) => Some(sqlx::Row::try_get::<i64, _>(&row, 0)?),
                                None => None,
                            }
                        } else if insert.execute(&mut **tx).await?.rows_affected() == 1 {
                            Some(
                                sqlx::query_scalar::<$db, i64>(sql(&self.q.run_id_at_instant))
                                    .bind(run.job_id)
                                    .bind(at)
                                    .fetch_one(&mut **tx)
                                    .await?,
                            )
                        } else {
                            None
                        };
                        if let Some(run_id) = run_id {
                            placed = Some((run_id, at));
                            break;
                        }
                    }
                    let Some((run_id, at)) = placed else {
                        return Err(Error::Conflict {
                            what: format!("every millisecond of a second for job {}", run.job_id),
                        });
                    };
                    next_free.insert(run.job_id, at + 1);
                    if one_attempt {
                        firsts.push(FirstAttempt {
                            run_id,
                            job_id: run.job_id,
                            partition_id: run.partition_id,
                            priority,
                            shard_index: 0,
                            shard_total: 1,
                            args_json: run.args_json,
                            not_before_ms: at,
                            executor_id: None,
                        });
                    }
                    inserted.push((run_id, at));
                }
                self.insert_first_attempts(tx, &firsts).await?;
                Ok(inserted)
            }

            /// The run `run_id` as it ended in this transaction, for [`Self::follow_ups_in`]
            /// (a cancelled run triggers no children, but a cancelled step moves its workflow
            /// run on).
            async fn ended_run_in(
                &self,
                tx: &mut Tx<$db>,
                run_id: i64,
                state: &str,
            ) -> Result<Option<EndedRun>, Error> {
                let run = sqlx::query_as::<$db, RunRecord>(sql(&self.q.run_get))
                    .bind(run_id)
                    .fetch_optional(&mut **tx)
                    .await?;
                Ok(run.map(|r| EndedRun {
                    run_id,
                    job_id: r.job_id,
                    node_id: r.node_id,
                    may_be_step: true,
                    may_have_children: true,
                    state: state.to_owned(),
                    output: None,
                }))
            }
        }

        #[async_trait]
        impl ChildStore for $store {
            async fn child_runs_of_run(&self, run_id: i64) -> Result<Vec<(i64, i64)>, Error> {
                Ok(
                    sqlx::query_as::<$db, (i64, i64)>(sql(&self.q.child_runs_of_run))
                        .bind(run_id)
                        .fetch_all(&self.pool)
                        .await?,
                )
            }

            async fn run_input(&self, run_id: i64) -> Result<Option<String>, Error> {
                Ok(
                    sqlx::query_scalar::<$db, Option<String>>(sql(&self.q.run_input))
                        .bind(run_id)
                        .fetch_optional(&self.pool)
                        .await?
                        .flatten(),
                )
            }

            fn follow_up_events(&self) -> Arc<FollowUpEvents> {
                Arc::clone(&self.events)
            }

            async fn jobs_with_children(&self) -> Result<Vec<(i64, String, String)>, Error> {
                Ok(
                    sqlx::query_as::<$db, (i64, String, String)>(sql(&self.q.jobs_with_children))
                        .fetch_all(&self.pool)
                        .await?,
                )
            }
        }
    };
}

pub(super) use follow_ups_store;
