{PE[r,c]: 0<=r<8 and 0<=c<8}
{PE[r,c]->PE[r-1,c]; PE[r,c]->PE[r,c-1]}
256 1024 64 16
