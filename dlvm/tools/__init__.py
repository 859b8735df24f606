"""Command-line tools: dlopt (IR passes), dlc (IR compiler), sharing one driver."""
