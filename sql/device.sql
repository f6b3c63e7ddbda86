-- The GUCs and gpuindex_device_info(), on any machine.

SHOW gpuindex.device;
SHOW gpuindex.gpu_min_batch;
SET gpuindex.device = cpu;
SHOW gpuindex.device;
SET gpuindex.device = nonsense;
SET gpuindex.gpu_min_batch = 0;
SET gpuindex.no_such_setting = 1;
RESET gpuindex.device;

-- no batch has run in this session yet
SELECT count(*) FROM gpuindex_last_batch();

-- a found GPU has a name, memory and compiled kernels; a missing one a reason
SELECT setting,
       CASE WHEN gpu_found THEN name IS NOT NULL AND memory_mib > 0 AND kernels_compiled AND reason IS NULL
            ELSE reason LIKE 'no usable GPU: %' AND name IS NULL END AS consistent
FROM gpuindex_device_info();
