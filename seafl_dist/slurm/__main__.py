"""``python -m seafl_dist.slurm``: print the path of the shell functions the sbatch scripts source."""
from seafl_dist.slurm import COMMON

print(COMMON)
