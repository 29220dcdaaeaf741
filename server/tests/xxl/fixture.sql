-- Jobs of a made-up XXL-JOB admin: every schedule type, several route and block strategies,
-- a GLUE job and a job whose group is gone.
INSERT INTO xxl_job_group (id, app_name, title, address_type, address_list, update_time) VALUES
  (1, 'billing-executor', 'Billing', 0, NULL, NOW()),
  (2, 'xxl-job-executor-sample', 'Sample', 1, 'http://10.0.0.7:9999/', NOW());

INSERT INTO xxl_job_info (id, job_group, job_desc, add_time, update_time, author, alarm_email,
  schedule_type, schedule_conf, misfire_strategy, executor_route_strategy, executor_handler,
  executor_param, executor_block_strategy, executor_timeout, executor_fail_retry_count,
  glue_type, glue_source, glue_remark, glue_updatetime, child_jobid, trigger_status) VALUES
  (1, 1, 'Nightly invoices', NOW(), NOW(), 'ana', 'ops@example.com', 'CRON', '0 30 2 * * ?',
   'DO_NOTHING', 'ROUND', 'invoiceJob', 'region=eu', 'SERIAL_EXECUTION', 600, 2,
   'BEAN', '', 'init', NOW(), '3', 1),
  (2, 1, 'Sync ledger', NOW(), NOW(), 'ana', '', 'FIX_RATE', '30',
   'FIRE_ONCE_NOW', 'SHARDING_BROADCAST', 'ledgerSync', '', 'DISCARD_LATER', 0, 0,
   'BEAN', '', 'init', NOW(), '', 1),
  (3, 2, 'Send report', NOW(), NOW(), 'bo', NULL, 'NONE', NULL,
   'DO_NOTHING', 'FAILOVER', 'reportJob', '{"to":"ops"}', 'COVER_EARLY', 0, 0,
   'BEAN', '', 'init', NOW(), NULL, 0),
  (4, 2, 'Clean tmp', NOW(), NOW(), 'bo', NULL, 'CRON', '0 0 * * * ?',
   'DO_NOTHING', 'FIRST', '', '', 'SERIAL_EXECUTION', 0, 0,
   'GLUE_SHELL', 'rm -rf /tmp/old', 'init', NOW(), NULL, 1),
  (5, 2, 'Warm caches', NOW(), NOW(), 'bo', NULL, 'CRON', '0 0/5 * * * ?',
   'DO_NOTHING', 'BUSYOVER', 'warmJob', NULL, 'SERIAL_EXECUTION', 30, 1,
   'BEAN', '', 'init', NOW(), NULL, 0),
  (6, 9, 'Orphan', NOW(), NOW(), 'bo', NULL, 'CRON', '0 0 1 * * ?',
   'DO_NOTHING', 'RANDOM', 'orphanJob', NULL, 'SERIAL_EXECUTION', 0, 0,
   'BEAN', '', 'init', NOW(), NULL, 0);
