"""RL algorithms written as recurrent-tensor programs, one readable file each."""
