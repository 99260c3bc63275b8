namespace kiln::worker {}
