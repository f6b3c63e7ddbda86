-- gpuindex.device = gpu and auto: where a GPU is usable, SET ... gpu is
-- accepted and large batches run on it (expected/device_gpu_1.out); where
-- none is, SET ... gpu is an ERROR and auto quietly uses the CPU
-- (expected/device_gpu.out).
\set VERBOSITY terse

SELECT gpu_found FROM gpuindex_device_info();
SET gpuindex.device = gpu;
SHOW gpuindex.device;
SELECT gpuindex_lower_bound(ARRAY(SELECT i * 2 FROM generate_series(1, 100000) i),
                            ARRAY(SELECT i FROM generate_series(1, 10000) i))
       = ARRAY(SELECT (i - 1) / 2 FROM generate_series(1, 10000) i)::bigint[] AS correct;
SELECT device, cpu_reason IS NULL AS no_cpu_reason FROM gpuindex_last_batch();
RESET gpuindex.device;
