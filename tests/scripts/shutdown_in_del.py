"""An iterator whose __del__ fails inside torch's _shutdown_workers, as a Ctrl-C while the workers stop does: Python
prints "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ ...>" with the traceback. The
workers are stopped first, so nothing is left running; then the iterator is made to fail its second shutdown."""

import torch
from torch.utils.data import DataLoader

if __name__ == "__main__":
    loader = DataLoader(torch.arange(64.0), batch_size=8, num_workers=2)
    it = iter(loader)
    first = next(it)
    it._shutdown_workers()  # the workers end here, as usual
    it._shutdown = False  # ... and the iterator's __del__ runs the shutdown again, failing inside torch's code
    it._workers_done_event = None
    del it
    print(f"first batch {first.tolist()}", flush=True)
