"""Load a job: discover every input and parse each rank in worker processes into compact tables."""
